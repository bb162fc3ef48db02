/* bench_reshard_plan.c -- CPU time of planning a TP8-stored revision for TP2.
 *
 * Usage: bench_reshard_plan [repetitions]   (default 200)
 *
 * Builds, with wc_pack, the manifest of a 2,000-tensor model (222 llama-style
 * layers of 9 tensors plus embedding and tied LM head) stored as a TP8
 * checkpoint: column-parallel weights split along dimension 0, row-parallel
 * along dimension 1, norms whole, 256 MiB payload objects. No payload bytes
 * exist: only the plan is measured. Then plans it for TP2 rank 0 and rank 1
 * (the same split dimensions, 2 parts), and prints the CPU time per plan
 * (CLOCK_PROCESS_CPUTIME_ID) averaged over the repetitions, next to the 5 ms
 * budget of issue 6. The first (cold) plan, which allocates, is shown apart.
 * Also shown: decoding and validating the encoded manifest, which weight_get
 * does before planning. Exits 1 if a plan is over budget. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_summary.h"
#include "wc_pack.h"
#include "wc_plan.h"

#define LAYERS 222
#define BUDGET_MS 5.0
#define TP_SRC 8

enum { REPLICATED, DIM0, DIM1 };

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct spec {
    char name[64];
    uint64_t shape[2];
    uint32_t ndim;
    int split;
    uint64_t off[TP_SRC][2];
    uint64_t shp[TP_SRC][2];
    wc_pack_fragment frags[TP_SRC];
} spec;

static void add(spec *s, const char *name, uint64_t rows, uint64_t cols, int split)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->ndim = cols ? 2 : 1;
    s->split = split;
    if (split == REPLICATED) return;
    uint32_t dim = split == DIM0 ? 0 : 1;
    for (uint32_t r = 0; r < TP_SRC; r++) {
        uint64_t size = s->shape[dim], q = size / TP_SRC, rem = size % TP_SRC;
        s->off[r][0] = s->off[r][1] = 0;
        s->shp[r][0] = s->shape[0];
        s->shp[r][1] = s->shape[1];
        s->off[r][dim] = q * r + (r < rem ? r : rem);
        s->shp[r][dim] = q + (r < rem);
        s->frags[r].offset = s->off[r];
        s->frags[r].shape = s->shp[r];
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: bench_reshard_plan [repetitions 1..100000]\n");
        return 2;
    }
    size_t n = 2 + LAYERS * 9, k = 0;
    spec *s = calloc(n, sizeof *s);
    wc_pack_tensor *in = calloc(n, sizeof *in);
    if (s == NULL || in == NULL) return 2;
    add(&s[k++], "model.embed_tokens.weight", 32000, 4096, DIM0);
    add(&s[k++], "lm_head.weight", 32000, 4096, DIM0);
    static const struct {
        const char *name;
        uint64_t rows, cols;
        int split;
    } layer[9] = {
        {"self_attn.q_proj.weight", 4096, 4096, DIM0},
        {"self_attn.k_proj.weight", 1024, 4096, DIM0},
        {"self_attn.v_proj.weight", 1024, 4096, DIM0},
        {"self_attn.o_proj.weight", 4096, 4096, DIM1},
        {"mlp.gate_proj.weight", 11008, 4096, DIM0},
        {"mlp.up_proj.weight", 11008, 4096, DIM0},
        {"mlp.down_proj.weight", 4096, 11008, DIM1},
        {"input_layernorm.weight", 4096, 0, REPLICATED},
        {"post_attention_layernorm.weight", 4096, 0, REPLICATED},
    };
    for (int l = 0; l < LAYERS; l++) {
        for (int t = 0; t < 9; t++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer[t].name);
            add(&s[k++], name, layer[t].rows, layer[t].cols, layer[t].split);
        }
    }
    for (size_t i = 0; i < n; i++) {
        in[i].name = s[i].name;
        in[i].dtype = WC_DTYPE_BF16;
        in[i].ndim = s[i].ndim;
        in[i].shape = s[i].shape;
        if (s[i].split != REPLICATED) {
            in[i].fragments = s[i].frags;
            in[i].n_fragments = TP_SRC;
        }
    }
    in[1].tied_to = "model.embed_tokens.weight";

    wc_identity id = {"bench", "llm", "llama-like", "main", 1};
    wc_pack_result res;
    char err[256] = "";
    double t0 = cpu_ms();
    int rc = wc_pack(&id, in, n, 256ull << 20, &res, err, sizeof err);
    double t_pack = cpu_ms() - t0;
    if (rc < 0) {
        fprintf(stderr, "bench_reshard_plan: pack: %s\n", err);
        return 2;
    }
    const wc_manifest *m = &res.manifest;
    uint8_t *enc;
    size_t enc_len;
    if (wc_manifest_encode(m, &enc, &enc_len) < 0) return 2;
    wc_manifest dec;
    int dec_reps = reps < 20 ? reps : 20;
    t0 = cpu_ms();
    for (int r = 0; r < dec_reps; r++) {
        if (wc_manifest_decode(enc, enc_len, &dec, err, sizeof err) < 0) {
            fprintf(stderr, "bench_reshard_plan: decode: %s\n", err);
            return 2;
        }
        if (r + 1 < dec_reps) wc_manifest_free(&dec);
    }
    double t_dec = (cpu_ms() - t0) / dec_reps;

    printf("bench_reshard_plan: %zu tensors, %zu fragments (TP%d), %zu objects of <= 256 MiB, "
           "%zu affinity units, manifest %zu bytes\n", m->n_tensors, m->n_fragments, TP_SRC,
           m->n_objects, m->n_units, enc_len);
    printf("pack (writer, once)          %8.3f ms CPU\n", t_pack);
    printf("decode + validate manifest   %8.3f ms CPU  (mean of %d)\n", t_dec, dec_reps);

    wc_placement *pl = calloc(dec.n_tensors, sizeof *pl);
    int over = 0;
    for (uint32_t rank = 0; rank < 2; rank++) {
        for (size_t i = 0; i < n; i++) {
            uint32_t ti = wc_manifest_find_tensor(&dec, s[i].name);
            if (s[i].split == REPLICATED) {
                pl[ti].kind = WC_PLACE_REPLICATED;
            } else {
                pl[ti].kind = WC_PLACE_SPLIT;
                pl[ti].dim = s[i].split == DIM0 ? 0 : 1;
                pl[ti].parts = 2;
                pl[ti].rank = rank;
            }
        }
        wc_plan plan = {0};
        t0 = cpu_ms();
        rc = wc_plan_build(&dec, pl, &plan, err, sizeof err);
        double t_cold = cpu_ms() - t0;
        if (rc < 0) {
            fprintf(stderr, "bench_reshard_plan: plan: %s\n", err);
            return 2;
        }
        t0 = cpu_ms();
        for (int r = 0; r < reps; r++) wc_plan_build(&dec, pl, &plan, err, sizeof err);
        double t_warm = (cpu_ms() - t0) / reps;
        size_t strided = 0;
        for (size_t i = 0; i < plan.n_ops; i++) strided += plan.ops[i].count > 1;
        printf("plan TP%d -> TP2 rank %u      %8.3f ms CPU  (mean of %d; cold %.3f ms)  "
               "budget %.1f ms  %.1fx under  | %zu ops (%zu strided), %.2f GiB\n",
               TP_SRC, rank, t_warm, reps, t_cold, BUDGET_MS, BUDGET_MS / t_warm, plan.n_ops,
               strided, (double)plan.total_bytes / (1u << 30));
        char w[64], f1[32], tg[16];
        bench_summary(bench_fmt(w, sizeof(w), "reshard plan, 2,000 tensors TP%d -> TP2 rank %u", TP_SRC, rank),
                      bench_fmt(f1, sizeof(f1), "%.3f ms CPU", t_warm), NULL, -1,
                      bench_fmt(tg, sizeof(tg), "< %.0f ms", BUDGET_MS));
        if (t_warm > BUDGET_MS || t_cold > BUDGET_MS) over = 1;
        wc_plan_free(&plan);
    }
    free(pl);
    wc_manifest_free(&dec);
    free(enc);
    wc_pack_result_free(&res);
    free(in);
    free(s);
    return over;
}
