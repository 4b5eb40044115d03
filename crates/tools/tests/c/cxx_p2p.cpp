// bulkwire.h from C++ (built with bspcxx): point-to-point messages around a ring and an
// allreduce, in std::vector buffers. Usage: cxx_p2p P (starts P copies of itself).
// Rank 0 prints "cxx p2p ok n=P".
#include <bulkwire.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

static void check(int rc, const char *what) {
    if (rc != BW_SUCCESS) {
        std::fprintf(stderr, "%s failed (%d): %s\n", what, rc, bw_last_error());
        bw_abort(what);
    }
}

int main(int argc, char **argv) {
    check(bw_init_spawn(argc > 1 ? std::atoi(argv[1]) : 2), "bw_init_spawn");
    int rank = 0, size = 0;
    check(bw_rank(&rank), "bw_rank");
    check(bw_size(&size), "bw_size");
    std::vector<double> out(1000, rank + 0.5), in(1000, -1.0);
    bw_request r = BW_REQUEST_NULL;
    check(bw_irecv(in.data(), in.size() * sizeof(double), (rank + size - 1) % size, 7, &r),
          "bw_irecv");
    check(bw_send(out.data(), out.size() * sizeof(double), (rank + 1) % size, 7), "bw_send");
    bw_status st;
    check(bw_wait(&r, &st), "bw_wait");
    const int prev = (rank + size - 1) % size;
    if (st.source != prev || st.count != in.size() * sizeof(double) || in[999] != prev + 0.5)
        bw_abort("ring message wrong");
    long long mine = rank + 1, total = 0;
    check(bw_allreduce(&mine, &total, 1, BW_INT64, BW_SUM), "bw_allreduce");
    if (total != static_cast<long long>(size) * (size + 1) / 2) bw_abort("allreduce wrong");
    if (rank == 0) std::printf("cxx p2p ok n=%d\n", size);
    check(bw_finalize(), "bw_finalize");
    return 0;
}
