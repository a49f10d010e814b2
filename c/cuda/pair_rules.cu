/* pair_rules.cu: the relations and bags of a loss call (host memory, as
 * backend.h has them) laid out for the device (cuda_internal.h:
 * uform_pair_rules_t): bags, then each edge kind's offsets, ids and weights,
 * all 4-byte words, uploaded by the loss with its other inputs in one copy. */
#include "cuda_internal.h"

static const uform_edges_t *uform_pair_edges(const uform_relations_t *relations, int set) {
    if (!relations) return NULL;
    const uform_edges_t *edges = set == UFORM_PAIR_RULES_ATTRACT ? &relations->attract
                               : set == UFORM_PAIR_RULES_REPEL   ? &relations->repel
                                                                 : &relations->ignore;
    return edges->offsets ? edges : NULL;
}

size_t uform_cuda_pair_rules_bytes(size_t n, const uint32_t *bags, const uform_relations_t *relations) {
    size_t words = bags ? n : 0;
    for (int set = 0; set < 3; set++) {
        const uform_edges_t *edges = uform_pair_edges(relations, set);
        if (!edges) continue;
        size_t count = edges->offsets[n];
        if (count > UINT32_MAX) return SIZE_MAX;
        words += (n + 1) + count + (edges->weights ? count : 0);
    }
    return words * sizeof(uint32_t);
}

uform_pair_rules_t uform_cuda_pair_rules_layout(const uform_contrastive_config_t *config, size_t n,
                                                const uint32_t *bags, const uform_relations_t *relations,
                                                uint8_t *host, uint8_t *device) {
    uform_pair_rules_t rules;
    memset(&rules, 0, sizeof(rules));
    rules.ambient = config->negatives == UFORM_NEGATIVES_AMBIENT;
    rules.ambient_weight = (double)config->ambient_repulsion_weight;
    uint32_t *words = (uint32_t *)host;
    size_t at = 0;   /* words written */
    if (bags) {
        memcpy(words, bags, n * sizeof(uint32_t));
        rules.bags = (const uint32_t *)device;
        at = n;
    }
    for (int set = 0; set < 3; set++) {
        const uform_edges_t *edges = uform_pair_edges(relations, set);
        if (!edges) continue;
        size_t count = edges->offsets[n];
        rules.offsets[set] = (const uint32_t *)device + at;
        for (size_t i = 0; i <= n; i++) words[at + i] = (uint32_t)edges->offsets[i];
        at += n + 1;
        rules.ids[set] = (const uint32_t *)device + at;
        if (count) memcpy(words + at, edges->ids, count * sizeof(uint32_t));
        at += count;
        if (edges->weights) {
            rules.weights[set] = (const float *)((const uint32_t *)device + at);
            if (count) memcpy(words + at, edges->weights, count * sizeof(float));
            at += count;
        }
    }
    return rules;
}
