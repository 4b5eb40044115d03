/* A 2-D five-point stencil (Jacobi heat diffusion) on an N x N grid, distributed in
 * blocks of rows; each superstep exchanges the boundary rows with bsp_put into the
 * neighbours' ghost rows.
 *
 *     bspcc -O2 stencil.c -o stencil && bsprun -n 4 ./stencil [N [STEPS]]
 *
 * At the end every process puts its rows into pid 0, which recomputes the whole run
 * sequentially and compares bit for bit (the same arithmetic in the same order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsp.h>

static double initial(int i, int j, int n) {
    if (i == 0) return 100.0;               /* hot top edge */
    if (i == n - 1 || j == 0 || j == n - 1) return 0.0;
    return (double)((i * 31 + j * 17) % 11); /* something to smooth */
}

/* One Jacobi step on rows [1, rows] of `cur` (rows 0 and rows+1 are ghosts), writing
 * `next`; global row index of local row r is first + r - 1. */
static void step(const double *cur, double *next, int rows, int n, int first) {
    for (int r = 1; r <= rows; r++) {
        int gi = first + r - 1;
        for (int j = 0; j < n; j++) {
            double v = cur[r * n + j];
            if (gi > 0 && gi < n - 1 && j > 0 && j < n - 1)
                v = 0.25 * (cur[(r - 1) * n + j] + cur[(r + 1) * n + j] + cur[r * n + j - 1] + cur[r * n + j + 1]);
            next[r * n + j] = v;
        }
    }
}

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int p = bsp_nprocs(), s = bsp_pid();
    int n = argc > 1 ? atoi(argv[1]) : 96;
    int steps = argc > 2 ? atoi(argv[2]) : 60;
    if (n < p || n < 3) bsp_abort("N must be at least max(3, p)");
    int first = s * n / p, rows = (s + 1) * n / p - first;
    size_t size = (size_t)(rows + 2) * n * sizeof(double);
    double *a = calloc(1, size), *b = calloc(1, size);
    for (int r = 1; r <= rows; r++)
        for (int j = 0; j < n; j++) a[r * n + j] = initial(first + r - 1, j, n);
    bsp_push_reg(a, (int)size);
    bsp_push_reg(b, (int)size);
    bsp_sync();
    double *cur = a, *nxt = b;
    for (int t = 0; t < steps; t++) {
        /* Our first row goes to the previous process's bottom ghost, our last row to the
         * next process's top ghost. `cur` is the same registration slot everywhere
         * (a or b alternate in step on every process). */
        int rowbytes = n * (int)sizeof(double);
        if (s > 0) {
            int prev_rows = s * n / p - (s - 1) * n / p;
            bsp_put(s - 1, &cur[1 * n], cur, (prev_rows + 1) * rowbytes, rowbytes);
        }
        if (s < p - 1) bsp_put(s + 1, &cur[rows * n], cur, 0, rowbytes);
        bsp_sync();
        step(cur, nxt, rows, n, first);
        double *t2 = cur;
        cur = nxt;
        nxt = t2;
    }

    /* Gather into pid 0 and compare with a sequential run. */
    double *all = s == 0 ? calloc((size_t)n * n, sizeof(double)) : NULL;
    bsp_push_reg(all, s == 0 ? n * n * (int)sizeof(double) : 0);
    bsp_sync();
    bsp_put(0, &cur[n], all, first * n * (int)sizeof(double), rows * n * (int)sizeof(double));
    bsp_sync();
    if (s == 0) {
        double *x = calloc((size_t)(n + 2) * n, sizeof(double)), *y = calloc((size_t)(n + 2) * n, sizeof(double));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) x[(i + 1) * n + j] = initial(i, j, n);
        for (int t = 0; t < steps; t++) {
            step(x, y, n, n, 0);
            double *t2 = x;
            x = y;
            y = t2;
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (all[i * n + j] != x[(i + 1) * n + j])
                    bsp_abort("stencil: cell (%d,%d) is %g, sequential %g", i, j, all[i * n + j], x[(i + 1) * n + j]);
        double centre = all[(n / 2) * n + n / 2];
        printf("stencil ok: %dx%d grid, %d steps, p=%d, centre %.6f\n", n, n, steps, p, centre);
    }
    bsp_end();
    return 0;
}
