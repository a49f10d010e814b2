#!/usr/bin/env bash
# test-arm-media.sh: the media decoders built for aarch64 against Debian's arm64
# codec libraries, and tests/c/test_decode.c run under qemu-user (by hand, as
# root on Debian/Ubuntu; not part of make test: it adds the arm64 architecture
# to apt for a moment and downloads about 10 MB).
#
# Every decoder source compiles with all of its libraries (-Werror, arm64
# headers of libjpeg, libpng, libwebp, libsndfile, libmpg123, FFmpeg);
# test_decode links the ones Debian ships as static archives (libjpeg, libpng,
# libwebp, zlib) and runs. Nothing is installed: the packages are unpacked into
# a temporary sysroot.
set -euo pipefail
cd "$(dirname "$0")/.."

ARM_CC=${ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_AARCH64:-qemu-aarch64}
WORK=$(mktemp -d)

added=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    added=1
fi
restore() { [ $added -eq 1 ] && dpkg --remove-architecture arm64 && apt-get update -qq || true; }
trap 'restore; rm -rf "$WORK"' EXIT
apt-get update -qq
mkdir -p "$WORK/debs" "$WORK/root" "$WORK/all" "$WORK/static"
chmod 755 "$WORK"; chmod 777 "$WORK/debs"
(cd "$WORK/debs" && apt-get download -qq libjpeg62-turbo-dev:arm64 libpng-dev:arm64 libwebp-dev:arm64 \
    libsndfile1-dev:arm64 libmpg123-dev:arm64 libavformat-dev:arm64 libavcodec-dev:arm64 \
    libswscale-dev:arm64 libavutil-dev:arm64 zlib1g-dev:arm64)
for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/root"; done

ROOT=$WORK/root
FLAGS=(-std=c11 -D_GNU_SOURCE -pthread -Ic/include -Ic/src -fno-math-errno -fno-trapping-math -Wall -Wextra -Werror -O2
       -isystem "$ROOT/usr/include" -isystem "$ROOT/usr/include/aarch64-linux-gnu"
       -isystem "$ROOT/usr/include/libpng16")
ALL=(-DUFORM_HAVE_JPEG -DUFORM_HAVE_PNG -DUFORM_HAVE_WEBP -DUFORM_HAVE_AUDIO -DUFORM_HAVE_MPG123
     -DUFORM_HAVE_VIDEO)
for source in c/src/media/decode/*.c; do
    "$ARM_CC" "${FLAGS[@]}" "${ALL[@]}" -c "$source" -o "$WORK/all/$(basename "$source" .c).o"
    "$ARM_CC" "${FLAGS[@]}" -DUFORM_HAVE_JPEG -DUFORM_HAVE_PNG -DUFORM_HAVE_WEBP \
        -c "$source" -o "$WORK/static/$(basename "$source" .c).o"
done
echo "every decoder compiles for aarch64 with all six media libraries"

LIB=$ROOT/usr/lib/aarch64-linux-gnu
"$ARM_CC" "${FLAGS[@]}" -static tests/c/test_decode.c "$WORK"/static/*.o c/src/core/error.c \
    -o "$WORK/test_decode" "$LIB/libpng16.a" "$LIB/libjpeg.a" "$LIB/libwebp.a" "$LIB/libz.a" -lm
"$QEMU" -cpu max "$WORK/test_decode"
