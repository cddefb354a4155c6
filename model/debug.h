/* Test-only switches: faults a test plants to show that a check catches
 * them, and one extra check. Read from the environment once, at start-up
 * (tri_debug_from_env), never in a loop: the trainer holds a tri_debug and
 * hands the model its copy (tri_gpt.debug). All zero in a normal run. The
 * variables are listed with every other one in docs/environment.md.
 *
 *   TRIDENT_DEBUG_SKIP_SP_GRAD_REDUCE=1   skip_sp_grad_reduce
 *   TRIDENT_DEBUG_SKIP_TIED_REDUCE=1      skip_tied_reduce
 *   TRIDENT_DEBUG_SKIP_ZERO_GATHER=1      skip_zero_gather
 *   TRIDENT_DEBUG_FP16_OVERFLOW_STEP=N    fp16_overflow_step
 *   TRIDENT_DEBUG_CHECK_DEVICE_MEMORY=1   check_device_memory
 *   TRIDENT_DEBUG_CKPT_WRITE_SLEEP_MS=N   ckpt_write_sleep_ms
 *
 * (tests/system/test_parallel.c and tests/system/test_mixed_precision.c set them.) */
#ifndef TRI_MODEL_DEBUG_H
#define TRI_MODEL_DEBUG_H

typedef struct tri_debug {
    /* sequence parallelism: leave out the sum over TP of the LayerNorm and
     * row-parallel bias gradients (model/runtime.c), so that the run leaves
     * the one-rank loss curve */
    int skip_sp_grad_reduce;
    /* pipeline: leave out the tied embedding's reduction over the embedding
     * group (src/train/step.c), so that a pipeline diverges from one rank */
    int skip_tied_reduce;
    /* ZeRO: leave out the all-gather of the updated parameters
     * (src/train/setup.c), so that the run leaves the one-rank curve */
    int skip_zero_gather;
    /* fp16: make one gradient element of this step (1-based) non-finite
     * after the reductions, as an overflow would (src/train/step.c);
     * 0: none */
    int fp16_overflow_step;
    /* with --device cpu-guard and several ranks: make the groups device
     * only where NCCL would take over (tri_dist_check_device_memory), so
     * that a host buffer reaching a collective after that point ends the run */
    int check_device_memory;
    /* asynchronous checkpoints: the background writer sleeps this many
     * milliseconds halfway through writing its tensors (model/ckpt/async.c),
     * so that a test can kill the job in the middle of a background write;
     * 0: none */
    int ckpt_write_sleep_ms;
} tri_debug;

/* Fills *d from the TRIDENT_DEBUG_* variables: a switch is on when its
 * variable starts with '1'; the step is the variable's number (atoi; 0 when
 * unset). Never fails. */
void tri_debug_from_env(tri_debug *d);

#endif
