/* capabilities.c: uform_capabilities, what this build and machine run.
 *
 * It lives in encode/ because it reports on two layers below: the media
 * decoders (uform_media_formats, media/decode) and the CPU backend's classes
 * (uform_cpu_classes_runnable and uform_cpu_class_resolve, cpu_backend.h, the
 * header of backend/cpu/ other layers may include). encode/ is the lowest
 * layer that knows both (docs/architecture.md section 10); backend/ and model/
 * know no media. The classes come from the very checks a pinned load makes,
 * so the set is exactly what uform_model_load_ram accepts. */
#include "backend/cpu/cpu_backend.h"
#include "backend/vram.h"
#include "core/internal.h"
#include "media/decode/decode.h"

uform_status_t uform_capabilities(uform_capabilities_t *capabilities) {
    if (!capabilities) return uform_fail(UFORM_INVALID_ARGUMENT, "capabilities: NULL output");
    memset(capabilities, 0, sizeof(*capabilities));
    uform_cpu_class_t best = UFORM_CPU_CLASS_SERIAL;
    /* AUTO always resolves (to SERIAL at worst), so this sets no error. */
    if (uform_cpu_class_resolve(UFORM_CPU_CLASS_AUTO, &best) != UFORM_OK) best = UFORM_CPU_CLASS_SERIAL;
    capabilities->media_formats = uform_media_formats();
    capabilities->cpu_classes = uform_cpu_classes_runnable() | 1u << UFORM_CPU_CLASS_SERIAL;
    capabilities->best_cpu_class = best;
    capabilities->gpu_backend_built = uform_vram_built();
    capabilities->gpus = uform_vram_devices();
#ifdef UFORM_HAVE_GLOO
    capabilities->mesh_engine_built = 1;
#else
    capabilities->mesh_engine_built = 0;
#endif
    return UFORM_OK;
}
