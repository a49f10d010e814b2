# libuform: the C library, its cffi module, tests and demo.
#
#   make            libuform.a, libuform.so and the Python module (in place)
#   make test       dependencies, C tests (also under ASan/UBSan), the C example, pytest,
#                   the aarch64 build under emulation (test-arm)
#   make test-gpu   the CUDA backend's operations against the CPU backend (tests/gpu/; skips
#                   with a message without a GPU or without the backend)
#   make test-arm   libuform and C tests cross-compiled for aarch64, run under qemu-user
#                   as NEON and SVE CPUs (skips with a message without the cross tools)
#   make demo       dependencies, then the demos (synthetic retrieval, multimodal, code search on the stdlib)
#   make bench      benchmarks against PyTorch, writes docs/benchmarks.md (slow)
#   make bench-pytest  the same through pytest-benchmark
#   make bench-training  one training step against PyTorch, writes docs/benchmarks-training.md
#   make bench-fp8-accuracy / bench-fp8-recall  FP8 products' accuracy under the CUDA emulation
#   make install PREFIX=/usr/local
#   make clean
#
# Media decoders use system libraries found with pkg-config, each optional
# (docs/decoding.md): `make UFORM_MEDIA=none` builds without any of them,
# `make UFORM_MEDIA="png audio"` with only those; what was found is written to
# c/build/media.txt, which build_ffi.py and `make install` read.

.DEFAULT_GOAL := all
PYTHON ?= python3
CC ?= cc
PREFIX ?= /usr/local
BUILD := c/build

# c/src is layered (docs/architecture.md section 10): core, media (decode), model,
# encode, train, backend/cpu. Every folder below c/src is compiled.
SOURCES := $(wildcard c/src/*/*.c) $(wildcard c/src/*/*/*.c)
HEADERS := c/include/uform.h $(wildcard c/src/*/*.h) $(wildcard c/src/*/*/*.h)
OBJECTS := $(patsubst c/src/%.c,$(BUILD)/obj/%.o,$(SOURCES))
SANITIZED_OBJECTS := $(patsubst c/src/%.c,$(BUILD)/asan/%.o,$(SOURCES))

WARNINGS := -Wall -Wextra -Werror
COMMON := -std=c11 -D_GNU_SOURCE -pthread -Ic/include -Ic/src -fno-math-errno -fno-trapping-math
CFLAGS_LIB := $(COMMON) $(WARNINGS) -O3 -fPIC -fvisibility=hidden
CFLAGS_ASAN := $(COMMON) $(WARNINGS) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=undefined
LDLIBS := -lm -pthread

C_TESTS := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_*.c))
# what every test program includes besides its own file: a change rebuilds them all
TEST_HEADERS := $(wildcard tests/c/*.h)

# ---- media libraries: each optional, found with pkg-config --------------------
# One decoder per name; a name is built when it is listed in UFORM_MEDIA and
# pkg-config finds every one of its packages.
PKG_CONFIG ?= pkg-config
UFORM_MEDIA ?= jpeg png webp audio mp3 video
MEDIA_PACKAGES_jpeg := libjpeg
MEDIA_PACKAGES_png := libpng
MEDIA_PACKAGES_webp := libwebp
MEDIA_PACKAGES_audio := sndfile
MEDIA_PACKAGES_mp3 := libmpg123
MEDIA_PACKAGES_video := libavformat libavcodec libswscale libavutil
MEDIA_DEFINE_jpeg := -DUFORM_HAVE_JPEG
MEDIA_DEFINE_png := -DUFORM_HAVE_PNG
MEDIA_DEFINE_webp := -DUFORM_HAVE_WEBP
MEDIA_DEFINE_audio := -DUFORM_HAVE_AUDIO
MEDIA_DEFINE_mp3 := -DUFORM_HAVE_MPG123
MEDIA_DEFINE_video := -DUFORM_HAVE_VIDEO
MEDIA_FOUND := $(foreach m,$(filter jpeg png webp audio mp3 video,$(UFORM_MEDIA)),\
                 $(if $(shell $(PKG_CONFIG) --exists $(MEDIA_PACKAGES_$(m)) 2>/dev/null && echo y),$(m)))
MEDIA_REQUIRES := $(strip $(foreach m,$(MEDIA_FOUND),$(MEDIA_PACKAGES_$(m))))
MEDIA_CFLAGS := $(strip $(foreach m,$(MEDIA_FOUND),$(MEDIA_DEFINE_$(m))) \
                  $(if $(MEDIA_REQUIRES),$(shell $(PKG_CONFIG) --cflags $(MEDIA_REQUIRES))))
MEDIA_LIBS := $(strip $(if $(MEDIA_REQUIRES),$(shell $(PKG_CONFIG) --libs $(MEDIA_REQUIRES))))

# ---- the mesh's collective engine: Gloo (Debian's libgloo-dev), optional ------
# Found by compiling and linking a one-line C++ program; `make UFORM_MESH=none`
# builds without it (Mesh.bootstrap then raises UnsupportedError).
CXX ?= g++
UFORM_MESH ?= gloo
MESH_FOUND := $(if $(filter gloo,$(UFORM_MESH)),$(shell printf '\043include <gloo/allgatherv.h>\nint main(){return 0;}\n' | \
                $(CXX) -x c++ - -lgloo -o /dev/null >/dev/null 2>&1 && echo gloo))
MESH_CFLAGS := $(if $(MESH_FOUND),-DUFORM_HAVE_GLOO)
MESH_LIBS := $(if $(MESH_FOUND),-lgloo -lstdc++)
CXX_SOURCES := $(if $(MESH_FOUND),$(wildcard c/src/train/*.cc))
# ---- the CUDA backend (c/cuda/): nvcc and cuBLASLt, optional -------------------
# Built when nvcc is on the PATH and the PyPI wheel nvidia-cublas is installed for
# $(PYTHON) (headers and the versioned libcublasLt.so.13, linked with an rpath);
# `make UFORM_CUDA=none` builds without it. One fat binary for every GPU class
# (Ampere sm_80, Ada sm_89, Hopper sm_90a, Blackwell sm_100a), plus compute_90
# PTX that the driver compiles for a later GPU none of those runs (sm_100a code
# runs on compute capability 10.0 only: a 10.3 or 12.x GPU); the CUDA runtime
# is linked statically, so a machine without a GPU or driver runs the library and
# its VRAM calls answer "no GPU found".
UFORM_CUDA ?= auto
NVCC ?= $(if $(filter-out none,$(UFORM_CUDA)),$(shell command -v nvcc 2>/dev/null))
CUBLAS_ROOT := $(if $(NVCC),$(shell $(PYTHON) -c "import os, sysconfig; \
  p = os.path.join(sysconfig.get_paths()['purelib'], 'nvidia', 'cu13'); \
  print(p if os.path.exists(os.path.join(p, 'include', 'cublasLt.h')) else '')" 2>/dev/null))
CUDA_FOUND := $(if $(CUBLAS_ROOT),cuda)
# NCCL (the PyPI wheel nvidia-nccl-cu13: nccl.h and libnccl.so.2, dlopen'ed on a
# mesh's first use, c/cuda/collectives.cu): optional; without it a mesh of GPU
# hosts sums its gradients through host memory over Gloo.
NCCL_ROOT := $(if $(CUDA_FOUND),$(shell $(PYTHON) -c "import os, sysconfig; \
  p = os.path.join(sysconfig.get_paths()['purelib'], 'nvidia', 'nccl'); \
  print(p if os.path.exists(os.path.join(p, 'include', 'nccl.h')) else '')" 2>/dev/null))
NCCL_FLAGS := $(if $(NCCL_ROOT),-I$(NCCL_ROOT)/include -DUFORM_HAVE_NCCL -DUFORM_NCCL_LIB_DIR='"$(NCCL_ROOT)/lib"')
CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/lib64/libcudart_static.a),/usr/local/cuda,$(abspath $(dir $(realpath $(NVCC)))/..))
CUDA_ARCHITECTURES := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
                      -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a \
                      -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -std=c++17 -O3 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror -Werror all-warnings \
              $(CUDA_ARCHITECTURES) -Ic/include -Ic/src -I$(CUBLAS_ROOT)/include \
              -DUFORM_CUBLAS_LIB_DIR='"$(CUBLAS_ROOT)/lib"' $(NCCL_FLAGS)
CUDA_CFLAGS := $(if $(CUDA_FOUND),-DUFORM_HAVE_CUDA)
comma := ,
# cuBLASLt is dlopen'ed when a GPU backend starts (c/cuda/cublaslt.h): the rpath
# tells that dlopen where the wheel was; nothing maps its 500 MB before.
CUDA_LIBS := $(if $(CUDA_FOUND),-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt \
               -Wl$(comma)-rpath$(comma)$(CUBLAS_ROOT)/lib $(if $(NCCL_ROOT),-Wl$(comma)-rpath$(comma)$(NCCL_ROOT)/lib) \
               -lstdc++)
CUDA_SOURCES := $(if $(CUDA_FOUND),$(wildcard c/cuda/*.cu))
CUDA_OBJECTS := $(patsubst c/cuda/%.cu,$(BUILD)/cuda/%.o,$(CUDA_SOURCES))

# Rewritten only when it changes, so objects that depend on it rebuild exactly
# when the set of libraries does.
MEDIA_FILE := $(BUILD)/media.txt
$(shell mkdir -p $(BUILD) && printf '%s\n' '# the media libraries this build found with pkg-config (written by make)' \
  'decoders=$(strip $(MEDIA_FOUND))' 'requires=$(MEDIA_REQUIRES)' 'cflags=$(MEDIA_CFLAGS)' \
  'libs=$(strip $(MEDIA_LIBS) $(MESH_LIBS) $(CUDA_LIBS))' 'mesh=$(MESH_FOUND)' 'cuda=$(CUDA_FOUND)' \
  > $(MEDIA_FILE).new && (cmp -s $(MEDIA_FILE).new $(MEDIA_FILE) && rm -f $(MEDIA_FILE).new || mv $(MEDIA_FILE).new $(MEDIA_FILE)))
# The compiler flags, rewritten only when they change, so a change of flags
# rebuilds every object (a stale object would keep the old code generation).
FLAGS_FILE := $(BUILD)/flags.txt
$(shell mkdir -p $(BUILD) && printf '%s\n' '# the flags objects were compiled with (written by make)' \
  'cc=$(CC)' 'lib=$(CFLAGS_LIB)' 'asan=$(CFLAGS_ASAN)' 'nvcc=$(NVCC) $(NVCC_FLAGS)' > $(FLAGS_FILE).new && \
  (cmp -s $(FLAGS_FILE).new $(FLAGS_FILE) && rm -f $(FLAGS_FILE).new || mv $(FLAGS_FILE).new $(FLAGS_FILE)))
$(OBJECTS) $(SANITIZED_OBJECTS) $(CUDA_OBJECTS): $(FLAGS_FILE)
CXXFLAGS_COMMON := -std=c++17 -D_GNU_SOURCE -pthread -Ic/include -Ic/src $(WARNINGS)
OBJECTS += $(patsubst c/src/%.cc,$(BUILD)/obj/%.o,$(CXX_SOURCES)) $(CUDA_OBJECTS)
# (the CUDA objects are not instrumented: ASan's tests link them as they are)
SANITIZED_OBJECTS += $(patsubst c/src/%.cc,$(BUILD)/asan/%.o,$(CXX_SOURCES)) $(CUDA_OBJECTS)
# What the library links beside libm and pthreads: media libraries, the mesh's
# engine, the CUDA runtime and cuBLASLt.
LINK_LIBS := $(MEDIA_LIBS) $(MESH_LIBS) $(CUDA_LIBS)
MEDIA_OBJECTS := $(filter $(BUILD)/obj/media/decode/%,$(OBJECTS))
SANITIZED_MEDIA_OBJECTS := $(filter $(BUILD)/asan/media/decode/%,$(SANITIZED_OBJECTS))
$(MEDIA_OBJECTS) $(SANITIZED_MEDIA_OBJECTS): $(MEDIA_FILE)
$(MEDIA_OBJECTS) $(SANITIZED_MEDIA_OBJECTS): MEDIA_OBJECT_CFLAGS := $(MEDIA_CFLAGS)
MESH_FLAGGED_OBJECTS := $(foreach f,train/mesh encode/capabilities,$(BUILD)/obj/$(f).o $(BUILD)/asan/$(f).o)
$(MESH_FLAGGED_OBJECTS): $(MEDIA_FILE)
$(MESH_FLAGGED_OBJECTS): MEDIA_OBJECT_CFLAGS := $(MESH_CFLAGS)
CUDA_FLAGGED_OBJECTS := $(foreach f,backend/vram train/mesh_nccl,$(BUILD)/obj/$(f).o $(BUILD)/asan/$(f).o)
$(CUDA_FLAGGED_OBJECTS): $(MEDIA_FILE)
$(CUDA_FLAGGED_OBJECTS): MEDIA_OBJECT_CFLAGS := $(CUDA_CFLAGS)

.SECONDARY:

.PHONY: all lib python test test-c test-cuda-emulated test-fuzz test-example test-python test-arm test-gpu gpu-fp8-probe arm-binaries demo bench bench-pytest bench-training bench-e4m3 bench-fp8-accuracy bench-fp8-recall install clean deps fuzz

all: lib python

lib: $(BUILD)/libuform.a $(BUILD)/libuform.so

$(BUILD)/obj/%.o: c/src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) $(MEDIA_OBJECT_CFLAGS) -c $< -o $@

$(BUILD)/asan/%.o: c/src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $(MEDIA_OBJECT_CFLAGS) -c $< -o $@

$(BUILD)/cuda/%.o: c/cuda/%.cu $(wildcard c/cuda/*.h c/cuda/*.cuh) $(HEADERS) $(MEDIA_FILE)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/obj/%.o: c/src/%.cc $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -O2 -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/asan/%.o: c/src/%.cc $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -c $< -o $@

$(BUILD)/libuform.a: $(OBJECTS) $(MEDIA_FILE)
	@rm -f $@
	ar rcs $@ $(OBJECTS)

$(BUILD)/libuform.so: $(OBJECTS) $(MEDIA_FILE)
	$(CC) -shared -Wl,-soname,libuform.so.4 -o $@ $(OBJECTS) $(LINK_LIBS) $(LDLIBS)

# The cffi module, built in place next to uform/__init__.py.
python: $(BUILD)/libuform.a
	$(PYTHON) build_ffi.py

# ---- dependencies: what a fresh Debian/Ubuntu machine lacks -----------------
deps:
	@bash scripts/install-deps.sh

# ---- tests ------------------------------------------------------------------
$(BUILD)/tests/%: tests/c/%.c $(TEST_HEADERS) $(SANITIZED_OBJECTS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) $< $(SANITIZED_OBJECTS) -o $@ $(LINK_LIBS) $(LDLIBS)

# The decoders on the command line, for tests/test_decode.py (under ASan/UBSan;
# only error.c and the media sources, so a UFORM_MEDIA=none build is quick).
$(BUILD)/decode_tool: tests/c/decode_tool.c $(BUILD)/asan/core/error.o $(SANITIZED_MEDIA_OBJECTS)
	$(CC) $(CFLAGS_ASAN) $^ -o $@ $(MEDIA_LIBS) $(LDLIBS)

# C++ tests: the CUDA backend's kernels run on the CPU under an emulation of a
# block's threads (c/cuda/emulation.h), header-only, no GPU or nvcc needed.
CXX_TESTS := $(patsubst tests/c/%.cc,%,$(wildcard tests/c/test_*.cc))
$(BUILD)/tests/%: tests/c/%.cc $(TEST_HEADERS) $(wildcard c/cuda/*.cuh) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer $< -o $@

test-c: $(addprefix $(BUILD)/tests/,$(C_TESTS) $(CXX_TESTS))
	@set -e; for t in $(C_TESTS) $(CXX_TESTS); do echo "== $$t (ASan+UBSan)"; $(BUILD)/tests/$$t; done

# The C example, compiled and linked only through pkg-config's flags of an installed tree.
test-example: lib
	@rm -rf $(BUILD)/prefix
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(BUILD)/prefix
	PKG_CONFIG_PATH=$(CURDIR)/$(BUILD)/prefix/lib/pkgconfig sh -c \
	  '$(CC) -std=c11 -Wall -Wextra -Werror examples/encode.c $$(pkg-config --cflags --libs uform) \
	   -Wl,-rpath,$(CURDIR)/$(BUILD)/prefix/lib -o $(BUILD)/encode'
	$(PYTHON) examples/make_checkpoint.py $(BUILD)/example.safetensors
	$(BUILD)/encode $(BUILD)/example.safetensors "hello, world"

# The fuzz targets under ASan/UBSan: deterministic mutations with gcc
# everywhere, plus timed libFuzzer runs where clang is installed. The media
# seeds are written at run time by Pillow, soundfile and PyAV.
FUZZ_MEDIA := image audio video
FUZZ_MEDIA_MUTATIONS_image := 6000
FUZZ_MEDIA_MUTATIONS_audio := 3000
FUZZ_MEDIA_MUTATIONS_video := 1500
# Leaks inside system libraries' error paths (see the file) are not ours to fix.
FUZZ_ENVIRONMENT := LSAN_OPTIONS=suppressions=$(CURDIR)/tests/c/lsan-system-libraries.supp:print_suppressions=0

# Mutates every seed of one kind; a crash, a sanitizer report or anything the
# decoders print (they never may) fails it.
define fuzz_media_mutations
@set -e; for seed in $(BUILD)/fuzz-media-seeds/$(1)/*; do \
	  $(FUZZ_ENVIRONMENT) $(BUILD)/fuzz_media_$(1) --mutate $(FUZZ_MEDIA_MUTATIONS_$(1)) 1 $$seed \
	    2>$(BUILD)/fuzz-stderr.txt || { cat $(BUILD)/fuzz-stderr.txt; exit 1; }; \
	  if [ -s $(BUILD)/fuzz-stderr.txt ]; then echo "decoding mutations of $$seed printed:"; \
	    head -n 5 $(BUILD)/fuzz-stderr.txt; exit 1; fi; done
endef

$(BUILD)/fuzz_media_%: fuzz/fuzz_%.c fuzz/fuzz_media_main.c fuzz/fuzz_media.h fuzz/fuzz_driver.h $(BUILD)/asan/core/error.o \
                       $(SANITIZED_MEDIA_OBJECTS)
	$(CC) $(CFLAGS_ASAN) fuzz/fuzz_$*.c fuzz/fuzz_media_main.c $(BUILD)/asan/core/error.o \
	  $(SANITIZED_MEDIA_OBJECTS) -o $@ $(MEDIA_LIBS) $(LDLIBS)

test-fuzz: $(SANITIZED_OBJECTS) $(addprefix $(BUILD)/fuzz_media_,$(FUZZ_MEDIA))
	@mkdir -p $(BUILD)/fuzz-seeds
	$(CC) $(CFLAGS_ASAN) fuzz/fuzz_safetensors.c fuzz/fuzz_main.c $(BUILD)/asan/core/error.o \
	  $(BUILD)/asan/core/json.o $(BUILD)/asan/core/safetensors.o $(BUILD)/asan/core/safetensors_write.o \
	  -o $(BUILD)/fuzz_main $(LDLIBS)
	$(BUILD)/fuzz_main --write-seeds $(BUILD)/fuzz-seeds
	@set -e; for seed in $(BUILD)/fuzz-seeds/*; do $(BUILD)/fuzz_main --mutate 20000 1 $$seed; done
	@rm -rf $(BUILD)/fuzz-media-seeds
	$(PYTHON) fuzz/make_media_seeds.py $(BUILD)/fuzz-media-seeds
	$(call fuzz_media_mutations,image)
	$(call fuzz_media_mutations,audio)
	$(call fuzz_media_mutations,video)
	@if command -v clang >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory fuzz && \
	  for target in safetensors $(FUZZ_MEDIA); do \
	    corpus=$(BUILD)/fuzz-media-seeds/$$target; seconds=5; \
	    if [ $$target = safetensors ]; then corpus=$(BUILD)/fuzz-seeds; seconds=20; fi; \
	    $(FUZZ_ENVIRONMENT) $(BUILD)/fuzz_$$target -max_total_time=$$seconds -timeout=10 -print_final_stats=0 \
	      $$corpus >$(BUILD)/fuzz-$$target.log 2>&1 || { tail -n 40 $(BUILD)/fuzz-$$target.log; exit 1; }; \
	    tail -n 2 $(BUILD)/fuzz-$$target.log; done; \
	else echo "clang not installed: the libFuzzer runs are skipped (the mutation drivers above ran)"; fi

test-python: all
	$(PYTHON) -m pytest -q --durations=20 tests

# ---- what needs a GPU (tests/gpu/): each program prints a table, or why it skips --
# `make test-gpu` on a GPU machine builds the library with the CUDA backend and
# runs them (every one, a failure does not stop the next; the status says if any
# failed); without a GPU or without the backend they say so and pass.
# scripts/gpu-check.sh runs it on a lent GPU machine with time limits and a summary.
GPU_TESTS := $(patsubst tests/gpu/%.c,%,$(wildcard tests/gpu/test_*.c))
$(BUILD)/gpu/%: tests/gpu/%.c $(TEST_HEADERS) $(BUILD)/libuform.a $(MEDIA_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) $(CUDA_CFLAGS) -Itests/c $< $(BUILD)/libuform.a -o $@ $(LINK_LIBS) $(LDLIBS)

# The attention forward's two block shapes timed side by side (the same bits).
$(BUILD)/gpu/gpu_attention_bench: bench/gpu_attention_bench.c bench/gpu_bench_start.h $(BUILD)/libuform.a $(MEDIA_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) $(CUDA_CFLAGS) $< $(BUILD)/libuform.a -o $@ $(LINK_LIBS) $(LDLIBS)

# The column sums' pass, one column a thread against four (the same bits).
$(BUILD)/gpu/gpu_columns_bench: bench/gpu_columns_bench.c bench/gpu_bench_start.h $(BUILD)/libuform.a $(MEDIA_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) $(CUDA_CFLAGS) $< $(BUILD)/libuform.a -o $@ $(LINK_LIBS) $(LDLIBS)

# Which FP8 products cuBLASLt accepts (scale modes, epilogues, output types), their
# errors against the host and their speed: cuBLASLt alone, no libuform; a GPU
# machine's diagnostic (bench/gpu_fp8_probe.cu), not part of test-gpu.
$(BUILD)/gpu/gpu_fp8_probe: bench/gpu_fp8_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCHITECTURES) -I$(CUBLAS_ROOT)/include $< -o $@ \
	  -L$(CUBLAS_ROOT)/lib -l:libcublasLt.so.13 -Xlinker -rpath -Xlinker $(CUBLAS_ROOT)/lib

gpu-fp8-probe: $(BUILD)/gpu/gpu_fp8_probe
	$(BUILD)/gpu/gpu_fp8_probe

test-gpu: $(addprefix $(BUILD)/gpu/,$(GPU_TESTS)) $(BUILD)/gpu/gpu_attention_bench $(BUILD)/gpu/gpu_columns_bench
	@echo "CUDA backend in this build: $(if $(CUDA_FOUND),yes (nvcc $(NVCC), cuBLASLt $(CUBLAS_ROOT)),no (nvcc or the nvidia-cublas wheel not found))"
	@status=0; for t in $(GPU_TESTS); do echo "== $$t"; $(BUILD)/gpu/$$t || { echo "== $$t FAILED"; status=1; }; done; \
	echo "== gpu_attention_bench (the attention forward, 64 against 128 query rows a block; the backward in 1, 2 and 4 parts)"; \
	$(BUILD)/gpu/gpu_attention_bench || { echo "== gpu_attention_bench FAILED"; status=1; }; \
	echo "== gpu_columns_bench (the column sums, one column a thread against four)"; \
	$(BUILD)/gpu/gpu_columns_bench || { echo "== gpu_columns_bench FAILED"; status=1; }; \
	if $(PYTHON) -c "import cffi, numpy" 2>/dev/null && $(MAKE) --no-print-directory python; then \
	  echo "== learns_retrieval (200 steps on the GPU and on the CPU, side by side)"; \
	  $(PYTHON) tests/gpu/learns_retrieval.py || status=1; \
	  echo "== bench/gpu_report.py (text_encode on the GPU against PyTorch; docs/benchmarks-gpu.md)"; \
	  $(PYTHON) bench/gpu_report.py --output docs/benchmarks-gpu.md || status=1; \
	  echo "== bench/gpu_train_report.py (one training step on the GPU against PyTorch)"; \
	  $(PYTHON) bench/gpu_train_report.py --output docs/benchmarks-gpu.md || status=1; \
	else echo "skip learns_retrieval and gpu_report: $(PYTHON) lacks cffi or numpy (scripts/gpu-check.sh --prepare brings them), or the module did not build"; fi; \
	exit $$status

# ---- the CUDA backend on the CPU (c/cuda/emulation.h) ---------------------------
# c/cuda/ (all but cuBLASLt's loader) compiled as C++ for the CPU under an
# emulation of CUDA: a block's threads are host threads, warp collectives and
# mma.sync exchanges between them, cuBLASLt's products done on the host; with
# ASan/UBSan. Every test of tests/gpu/ runs against it: every hand-written
# kernel, a VRAM model's verbs, a GPU trainer's steps, GPU hosts of a mesh, here
# without a GPU or nvcc (make test runs it).
EMULATION_FLAGS := -DUFORM_CUDA_EMULATION -DUFORM_HAVE_CUDA
EMULATED_CUDA_OBJECTS := $(patsubst c/cuda/%.cu,$(BUILD)/emulated/%.o,$(filter-out c/cuda/cublaslt.cu,$(wildcard c/cuda/*.cu))) \
                         $(BUILD)/emulated/vram.o $(BUILD)/emulated/mesh_nccl.o
$(BUILD)/emulated/%.o: c/cuda/%.cu $(wildcard c/cuda/*.h c/cuda/*.cuh) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) $(EMULATION_FLAGS) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	  -fno-sanitize-recover=undefined -x c++ -c $< -o $@
$(BUILD)/emulated/vram.o: c/src/backend/vram.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -DUFORM_HAVE_CUDA -c $< -o $@
$(BUILD)/emulated/mesh_nccl.o: c/src/train/mesh_nccl.c $(HEADERS) c/cuda/collectives.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ASAN) -DUFORM_HAVE_CUDA -c $< -o $@
$(BUILD)/emulated/test_%: tests/gpu/test_%.c $(TEST_HEADERS) $(EMULATED_CUDA_OBJECTS) $(SANITIZED_OBJECTS)
	$(CC) $(CFLAGS_ASAN) $(EMULATION_FLAGS) -Itests/c $< \
	  $(filter-out $(CUDA_OBJECTS) $(BUILD)/asan/backend/vram.o $(BUILD)/asan/train/mesh_nccl.o,$(SANITIZED_OBJECTS)) \
	  $(EMULATED_CUDA_OBJECTS) \
	  -o $@ $(MEDIA_LIBS) $(MESH_LIBS) $(LDLIBS) -lstdc++

EMULATED_GPU_TESTS := test_cuda_ops test_nccl_ops test_vram_model test_vram_arena test_vram_trainer test_vram_mesh test_vram_replicas
# Two emulated devices for all (the one-GPU tests use the first). Each test is
# one thread but test_vram_replicas (two GPUs, two threads taking turns), which
# runs beside the others on the second core, its output printed after theirs.
test-cuda-emulated: $(addprefix $(BUILD)/emulated/,$(EMULATED_GPU_TESTS))
	@set -e; export UFORM_EMULATION_DEVICES=2; beside=$(BUILD)/emulated/test_vram_replicas.log; \
	$(BUILD)/emulated/test_vram_replicas > $$beside 2>&1 & replicas=$$!; \
	for t in $(filter-out test_vram_replicas,$(EMULATED_GPU_TESTS)); do \
	  echo "== $$t (CUDA emulated on the CPU; ASan+UBSan)"; $(BUILD)/emulated/$$t || { kill $$replicas; exit 1; }; done; \
	echo "== test_cuda_ops again, blocks and threads in the opposite order (a race a barrier should order shows in one of the two)"; \
	UFORM_EMULATION_ORDER=reverse $(BUILD)/emulated/test_cuda_ops || { kill $$replicas; exit 1; }; \
	echo "== test_cuda_ops again, each warp as far as it goes before the next (warps apart, as a GPU may let them drift)"; \
	UFORM_EMULATION_ORDER=warps $(BUILD)/emulated/test_cuda_ops || { kill $$replicas; exit 1; }; \
	echo "== test_vram_replicas (CUDA emulated on the CPU, two devices; ASan+UBSan; ran beside the tests above)"; \
	status=0; wait $$replicas || status=$$?; cat $$beside; exit $$status

# ---- aarch64: cross-compiled, run under user-mode emulation -------------------
# The whole library for aarch64 without media libraries (no x86 file or
# intrinsic is reachable there: their bodies are behind __x86_64__), linked
# statically so qemu-user needs no sysroot. scripts/test-arm.sh runs the tests
# once per emulated CPU (NEON alone, SVE at 128, 256 and 512 bits) and prints a
# table; docs/arm.md says what ran.
ARM_CC ?= aarch64-linux-gnu-gcc
ARM_AR ?= aarch64-linux-gnu-ar
ARM_BUILD := $(BUILD)/arm
ARM_CFLAGS := $(COMMON) $(WARNINGS) -O3
ARM_OBJECTS := $(patsubst c/src/%.c,$(ARM_BUILD)/obj/%.o,$(SOURCES))
$(ARM_OBJECTS): $(FLAGS_FILE)
ARM_TESTS := test_kernels test_sgemm test_ops test_api test_safetensors test_fp8 test_trainer reference_outputs

$(ARM_BUILD)/obj/%.o: c/src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(ARM_CC) $(ARM_CFLAGS) -c $< -o $@

$(ARM_BUILD)/libuform.a: $(ARM_OBJECTS)
	@rm -f $@
	$(ARM_AR) rcs $@ $(ARM_OBJECTS)

$(ARM_BUILD)/tests/%: tests/c/%.c $(TEST_HEADERS) $(ARM_BUILD)/libuform.a
	@mkdir -p $(dir $@)
	$(ARM_CC) $(ARM_CFLAGS) -static $< $(ARM_BUILD)/libuform.a -o $@ $(LDLIBS)

# The same programs for this machine, optimised as the library is (the digests
# and reference outputs the emulated runs are compared with).
$(BUILD)/native/%: tests/c/%.c $(TEST_HEADERS) $(BUILD)/libuform.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) $< $(BUILD)/libuform.a -o $@ $(LINK_LIBS) $(LDLIBS)

arm-binaries: $(addprefix $(ARM_BUILD)/tests/,$(ARM_TESTS)) $(BUILD)/native/test_kernels \
              $(BUILD)/native/reference_outputs

test-arm:
	@if ! command -v $(ARM_CC) >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then \
	  echo "skip test-arm: $(ARM_CC) or qemu-aarch64 is not installed" \
	       "(scripts/install-deps.sh installs gcc-aarch64-linux-gnu and qemu-user on Debian/Ubuntu)"; \
	else $(MAKE) --no-print-directory arm-binaries && \
	  BUILD=$(BUILD) PYTHON=$(PYTHON) bash scripts/test-arm.sh; fi

# Each stage's wall time is printed after it and again in a table at the end
# (CI has a time budget: this is where to look when it grows).
TEST_STAGES := all test-c test-cuda-emulated test-fuzz test-example test-arm test-gpu test-python
test: deps
	@set -e; table=""; \
	for stage in $(TEST_STAGES); do start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$stage; \
	  line=$$(printf '%-20s %5d s' $$stage $$(( $$(date +%s) - start ))); \
	  echo "[make test] $$line"; table="$$table$$line\n"; done; \
	echo "[make test] every stage passed; wall time per stage:"; printf "$$table"

demo: deps
	$(MAKE) --no-print-directory all
	$(PYTHON) examples/demo.py
	$(PYTHON) examples/demo_multimodal.py
	$(PYTHON) examples/code_search.py

# Side by side with PyTorch on the same weights; writes docs/benchmarks.md.
bench: deps
	$(MAKE) --no-print-directory all
	$(PYTHON) bench/report.py

# E4M3 against BF16 weights, uform alone, every CPU class; writes docs/benchmarks-e4m3.md
# (make bench copies it into docs/benchmarks.md).
bench-e4m3: deps
	$(MAKE) --no-print-directory all
	$(PYTHON) bench/quantized_report.py --output docs/benchmarks-e4m3.md

# What FP8 products (E4M3 weights and activations, c/cuda/gemm_fp8.cu) cost in
# accuracy, under the CUDA emulation (no GPU needed; docs/gpu.md, "E4M3"):
# bench-fp8-accuracy, embeddings' cosines against BF16 at the benchmark shape
# (tens of minutes); bench-fp8-recall, held-out recall@1 of make demo's trained
# model in BF16, E4M3 and FP8 (about 8 minutes, after training it when
# c/build/demo.safetensors is missing: about a minute).
# The emulation optimised and without the sanitizers (the tests above run it
# with them; -fno-strict-aliasing: the emulated mma.sync reads registers as
# BF16 pairs): the fibers' stacks under ASan made the FP8 runs far slower.
FAST_EMULATED_CUDA_OBJECTS := $(patsubst $(BUILD)/emulated/%,$(BUILD)/emulated-fast/%,$(EMULATED_CUDA_OBJECTS))
$(BUILD)/emulated-fast/%.o: c/cuda/%.cu $(wildcard c/cuda/*.h c/cuda/*.cuh) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_COMMON) $(EMULATION_FLAGS) -O2 -fno-strict-aliasing -x c++ -c $< -o $@
$(BUILD)/emulated-fast/vram.o: c/src/backend/vram.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) -DUFORM_HAVE_CUDA -c $< -o $@
$(BUILD)/emulated-fast/mesh_nccl.o: c/src/train/mesh_nccl.c $(HEADERS) c/cuda/collectives.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_LIB) -DUFORM_HAVE_CUDA -c $< -o $@
FP8_ACCURACY_CHECKPOINT := $(BUILD)/fp8-accuracy-d12-h512.safetensors
$(BUILD)/emulated-fast/fp8_accuracy: bench/fp8_accuracy.c $(FAST_EMULATED_CUDA_OBJECTS) $(OBJECTS)
	$(CC) $(CFLAGS_LIB) $(EMULATION_FLAGS) bench/fp8_accuracy.c \
	  $(filter-out $(CUDA_OBJECTS) $(BUILD)/obj/backend/vram.o $(BUILD)/obj/train/mesh_nccl.o,$(OBJECTS)) \
	  $(FAST_EMULATED_CUDA_OBJECTS) \
	  -o $@ $(MEDIA_LIBS) $(MESH_LIBS) $(LDLIBS) -lstdc++
bench-fp8-accuracy: deps $(BUILD)/emulated-fast/fp8_accuracy
	$(PYTHON) examples/make_checkpoint.py $(FP8_ACCURACY_CHECKPOINT) --depth 12 --hidden 512 --dimensions 512 \
	  --context 512 --seed 0
	$(BUILD)/emulated-fast/fp8_accuracy $(FP8_ACCURACY_CHECKPOINT)
bench-fp8-recall: deps $(BUILD)/emulated-fast/fp8_accuracy
	$(MAKE) --no-print-directory all
	test -f $(BUILD)/demo.safetensors || $(PYTHON) examples/demo.py
	$(PYTHON) bench/held_out_pairs.py $(BUILD)/demo-held-out.txt
	$(BUILD)/emulated-fast/fp8_accuracy $(BUILD)/demo.safetensors $(BUILD)/demo-held-out.txt

# One training step against PyTorch; writes docs/benchmarks-training.md.
bench-training: deps
	$(MAKE) --no-print-directory all
	$(PYTHON) bench/train_report.py

# The same comparisons through pytest-benchmark (also their correctness checks).
bench-pytest: deps
	$(MAKE) --no-print-directory all
	$(PYTHON) -m pytest -q bench --benchmark-columns=min,mean,rounds

# libFuzzer targets of the safetensors parser and the media decoders (needs clang).
MEDIA_SOURCES := $(wildcard c/src/media/decode/*.c)
FUZZ_CLANG := clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Ic/include -Ic/src
fuzz:
	@mkdir -p $(BUILD)
	$(FUZZ_CLANG) fuzz/fuzz_safetensors.c c/src/core/safetensors.c c/src/core/json.c c/src/core/error.c -lm \
	  -o $(BUILD)/fuzz_safetensors
	@set -e; for kind in $(FUZZ_MEDIA); do \
	  echo "$(FUZZ_CLANG) $(MEDIA_CFLAGS) fuzz/fuzz_$$kind.c (media sources) -o $(BUILD)/fuzz_$$kind"; \
	  $(FUZZ_CLANG) $(MEDIA_CFLAGS) fuzz/fuzz_$$kind.c $(MEDIA_SOURCES) c/src/core/error.c $(MEDIA_LIBS) -lm -pthread \
	    -o $(BUILD)/fuzz_$$kind; done
	@echo "run: $(BUILD)/fuzz_safetensors -max_total_time=60"
	@echo "     $(BUILD)/fuzz_image|fuzz_audio|fuzz_video -max_total_time=60 CORPUS (seeds: fuzz/make_media_seeds.py)"

# ---- install ----------------------------------------------------------------
install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 c/include/uform.h $(DESTDIR)$(PREFIX)/include/uform.h
	install -m 644 $(BUILD)/libuform.a $(DESTDIR)$(PREFIX)/lib/libuform.a
	install -m 755 $(BUILD)/libuform.so $(DESTDIR)$(PREFIX)/lib/libuform.so.4
	ln -sf libuform.so.4 $(DESTDIR)$(PREFIX)/lib/libuform.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@REQUIRES_PRIVATE@|$(MEDIA_REQUIRES)|' \
	  -e 's|@LIBS_PRIVATE@|$(MESH_LIBS) $(CUDA_LIBS)|' c/uform.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/uform.pc

clean:
	rm -rf $(BUILD) uform/_uform*.so uform/_uform.c uform/_uform.o build *.egg-info
