/* labkit N-queens: count every solution on an n x n board with T threads.
 *
 * Work is split by the queens of the first two rows: each (row0, row1) pair is
 * a task; threads take tasks from a shared atomic counter, so all T threads
 * stay busy until the end. Each task is solved by the classic bitmask
 * backtracking (columns and both diagonals as bit sets).
 *
 * usage: nqueens N [THREADS [ITERATIONS]]
 * prints one line: "nqueens n=N threads=T solutions=S seconds=W"; with ITERATIONS, solves the
 * board that many times in this one process, one line per solve ending " iteration=I" (1-based),
 * each timed on its own (warm-up: the first solves may be slower).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int n;
static uint32_t full;
static int ntasks;
static int task_c0[64 * 64], task_c1[64 * 64];
static atomic_int next_task;
static atomic_ullong total;

static uint64_t solve(uint32_t cols, uint32_t d1, uint32_t d2) {
    if (cols == full) return 1;
    uint64_t count = 0;
    uint32_t avail = full & ~(cols | d1 | d2);
    while (avail) {
        uint32_t bit = avail & -avail;
        avail ^= bit;
        count += solve(cols | bit, ((d1 | bit) << 1) & full, (d2 | bit) >> 1);
    }
    return count;
}

static void *worker(void *arg) {
    (void)arg;
    uint64_t local = 0;
    for (;;) {
        int t = atomic_fetch_add(&next_task, 1);
        if (t >= ntasks) break;
        uint32_t b0 = 1u << task_c0[t], b1 = 1u << task_c1[t];
        uint32_t cols = b0 | b1;
        uint32_t d1 = (((b0 << 1) | b1) << 1) & full;
        uint32_t d2 = ((b0 >> 1) | b1) >> 1;
        local += solve(cols, d1, d2);
    }
    atomic_fetch_add(&total, local);
    return NULL;
}

static double solve_once(int threads, pthread_t *tid) {
    struct timespec t0, t1;
    atomic_store(&next_task, 0);
    atomic_store(&total, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s N [THREADS [ITERATIONS]]\n", argv[0]); return 2; }
    n = atoi(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int iterations = argc > 3 ? atoi(argv[3]) : 0;
    if (n < 4 || n > 30) { fprintf(stderr, "N must be between 4 and 30\n"); return 2; }
    if (threads < 1 || threads > 1024) { fprintf(stderr, "THREADS must be between 1 and 1024\n"); return 2; }
    if (argc > 3 && (iterations < 1 || iterations > 100000)) {
        fprintf(stderr, "ITERATIONS must be between 1 and 100000\n"); return 2;
    }
    full = (n == 32) ? 0xffffffffu : ((1u << n) - 1);
    for (int c0 = 0; c0 < n; c0++)
        for (int c1 = 0; c1 < n; c1++)
            if (c1 < c0 - 1 || c1 > c0 + 1) { task_c0[ntasks] = c0; task_c1[ntasks] = c1; ntasks++; }
    pthread_t *tid = malloc(sizeof(pthread_t) * threads);
    if (!tid) { fprintf(stderr, "out of memory\n"); return 1; }
    for (int it = 1; it <= (iterations ? iterations : 1); it++) {
        double secs = solve_once(threads, tid);
        printf("nqueens n=%d threads=%d solutions=%llu seconds=%.6f", n, threads,
               (unsigned long long)atomic_load(&total), secs);
        if (iterations) printf(" iteration=%d", it);
        printf("\n");
        fflush(stdout);
    }
    free(tid);
    return 0;
}
