/* mesh_gloo.cc: the CPU mesh's collective engine, Gloo over TCP, behind the C
 * functions of mesh.h.
 *
 * Gloo meets its peers through a rendezvous Store; ours is the run's folder of
 * the shared directory (mesh_directory.c: atomic files, a fresh run id, the
 * mesh's timeout), so nothing left by an earlier run is ever read. Gloo
 * reports failures by throwing; every entry point here catches everything
 * and answers UFORM_MESH with the message, so no exception crosses into C.
 * Each collective carries a fresh tag, so a message of one can never be taken
 * for another's. */
extern "C" {
#include "train/mesh_directory.h"   /* C declarations: uform_fail, the directory's functions */
}
#include "train/mesh_engine.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

/* Gloo's keys as files of the run's folder: characters outside [A-Za-z0-9._-]
 * become '_' followed by their hex value, so every key is a safe file name. */
std::string file_key(const std::string &key) {
    static const char hex[] = "0123456789abcdef";
    std::string out = "gloo.";
    for (unsigned char c : key) {
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '.' || c == '-';
        if (plain) out += (char)c;
        else out += '_', out += hex[c >> 4], out += hex[c & 15];
    }
    return out;
}

class DirectoryStore : public gloo::rendezvous::Store {
  public:
    DirectoryStore(const uform_mesh_directory_t *directory, uint64_t timeout_ms)
        : directory_(directory), timeout_ms_(timeout_ms) {}

    void set(const std::string &key, const std::vector<char> &data) override {
        if (uform_mesh_directory_set(directory_, file_key(key).c_str(), data.data(),
                                     data.size()) != UFORM_OK)
            throw gloo::IoException(uform_last_error());
    }
    std::vector<char> get(const std::string &key) override {
        void *value = nullptr;
        size_t size = 0;
        if (uform_mesh_directory_get(directory_, file_key(key).c_str(), timeout_ms_,
                                     &value, &size) != UFORM_OK)
            throw gloo::IoException(uform_last_error());
        std::vector<char> out((char *)value, (char *)value + size);
        free(value);
        return out;
    }
    void wait(const std::vector<std::string> &keys) override {
        wait(keys, std::chrono::milliseconds(timeout_ms_));
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
        for (const std::string &key : keys) {
            void *value = nullptr;
            size_t size = 0;
            if (uform_mesh_directory_get(directory_, file_key(key).c_str(),
                                         (uint64_t)timeout.count(), &value, &size) != UFORM_OK)
                throw gloo::IoException(uform_last_error());
            free(value);
        }
    }

  private:
    const uform_mesh_directory_t *directory_;
    uint64_t timeout_ms_;
};

struct Engine {
    std::shared_ptr<gloo::transport::Device> device;
    std::shared_ptr<gloo::rendezvous::Context> context;
    uint32_t tag = 0;
};

uform_status_t failed(const char *what, const std::exception &e) {
    return uform_fail(UFORM_MESH, "mesh: %s: %s", what, e.what());
}

/* Gloo's TCP transport writes with plain send/writev, so a write to a peer
 * that closed its connection (killed, or a host that saw a collective fail and
 * closed its own) raises SIGPIPE, whose default action ends the process. A
 * library must neither die of it nor change the process's handlers: while
 * Gloo runs, SIGPIPE is blocked in the calling thread (the transport's own
 * thread, started during connect, inherits the block for its life), the
 * write fails with EPIPE, which Gloo throws as an exception, and a SIGPIPE
 * left pending meanwhile is taken before the mask is restored. */
class SigpipeBlocked {
  public:
    SigpipeBlocked() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        was_pending_ = sigismember(&pending, SIGPIPE) == 1;
        pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
    }
    ~SigpipeBlocked() {
        sigset_t pending;
        sigemptyset(&pending);
        sigpending(&pending);
        if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
            struct timespec now = {0, 0};
            sigtimedwait(&pipe_, nullptr, &now);
        }
        pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
    }
    SigpipeBlocked(const SigpipeBlocked &) = delete;
    SigpipeBlocked &operator=(const SigpipeBlocked &) = delete;

  private:
    sigset_t pipe_, saved_;
    bool was_pending_ = false;
};

} // namespace

extern "C" uform_status_t uform_gloo_connect(const uform_mesh_directory_t *directory, size_t host,
                                             size_t hosts, uint64_t timeout_ms,
                                             const char *hostname, const char *interface,
                                             void **engine) {
    *engine = nullptr;
    Engine *e = nullptr;
    SigpipeBlocked quiet;
    try {
        e = new Engine();
        gloo::transport::tcp::attr attr;
        if (hostname && *hostname) attr.hostname = hostname;
        else if (interface && *interface) attr.iface = interface;
        else {
            char name[256] = {0};
            if (gethostname(name, sizeof(name) - 1) != 0)
                throw gloo::IoException("gethostname failed: set UFORM_MESH_HOSTNAME");
            attr.hostname = name;
        }
        e->device = gloo::transport::tcp::CreateDevice(attr);
        e->context = std::make_shared<gloo::rendezvous::Context>((int)host, (int)hosts);
        e->context->setTimeout(std::chrono::milliseconds(timeout_ms));
        DirectoryStore store(directory, timeout_ms);
        e->context->connectFullMesh(store, e->device);
        *engine = e;
        return UFORM_OK;
    } catch (const std::exception &x) {
        delete e;
        return failed("connecting the Gloo engine (TCP; set UFORM_MESH_HOSTNAME to an address the "
                      "other hosts reach)",
                      x);
    } catch (...) {
        delete e;
        return uform_fail(UFORM_MESH, "mesh: connecting the Gloo engine failed");
    }
}

extern "C" uform_status_t uform_gloo_allgatherv(void *engine, const void *in, const size_t *counts,
                                                size_t hosts, void *out, uint64_t timeout_ms) {
    Engine *e = (Engine *)engine;
    SigpipeBlocked quiet;
    try {
        std::vector<size_t> elements(counts, counts + hosts);
        gloo::AllgathervOptions options(e->context);
        options.setInput((char *)in, counts[e->context->rank]);
        options.setOutput((char *)out, elements);
        options.setTag(++e->tag);
        options.setTimeout(std::chrono::milliseconds(timeout_ms));
        gloo::allgatherv(options);
        return UFORM_OK;
    } catch (const std::exception &x) {
        return failed("a gather across hosts failed", x);
    } catch (...) {
        return uform_fail(UFORM_MESH, "mesh: a gather across hosts failed");
    }
}

extern "C" uform_status_t uform_gloo_sum(void *engine, float *values, size_t count,
                                         uint64_t timeout_ms) {
    Engine *e = (Engine *)engine;
    SigpipeBlocked quiet;
    try {
        gloo::AllreduceOptions options(e->context);
        options.setOutput(values, count);
        options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        void (*sum)(void *, const void *, const void *, size_t) = &gloo::sum<float>;
        options.setReduceFunction(sum);
        options.setTag(++e->tag);
        options.setTimeout(std::chrono::milliseconds(timeout_ms));
        gloo::allreduce(options);
        return UFORM_OK;
    } catch (const std::exception &x) {
        return failed("a sum across hosts failed", x);
    } catch (...) {
        return uform_fail(UFORM_MESH, "mesh: a sum across hosts failed");
    }
}

extern "C" void uform_gloo_close(void *engine) {
    SigpipeBlocked quiet;
    try {
        delete (Engine *)engine;
    } catch (...) {
    }
}
