// MulticoreBSP for C's C++ interface (bsp.hpp), as its hello_world_cpp uses it: a class
// deriving from mcbsp::BSP_program with spmd() and newInstance(), begun twice from main
// (begin(P), then begin() with bsp_nprocs() processes). Usage: cxx_mcbsp P. Every process
// prints "hello from S of N"; pid 0's object keeps the sum of the pids its spmd()
// gathered, which main prints after each section as "sum K = X (N processes)".
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <bsp.hpp>

class Gather : public mcbsp::BSP_program {
  protected:
    void spmd() override {
        const unsigned n = bsp_nprocs(), s = bsp_pid();
        std::printf("hello from %u of %u\n", s, n);
        std::fflush(stdout);
        std::vector<unsigned> all(n, 0);
        bsp_push_reg(all.data(), n * sizeof(unsigned));
        bsp_sync();
        bsp_put(0, &s, all.data(), s * sizeof(unsigned), sizeof s);
        bsp_sync();
        if (s == 0) {
            for (unsigned k = 0; k < n; k++) sum += all[k];
            procs = n;
        }
        bsp_pop_reg(all.data());
    }

    BSP_program *newInstance() override { return new Gather(); }

  public:
    unsigned sum = 0, procs = 0;
};

int main(int argc, char **argv) {
    const unsigned p = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 2;
    Gather g;
    g.begin(p);
    std::printf("sum 1 = %u (%u processes)\n", g.sum, g.procs);
    std::printf("between sections\n");
    g.sum = 0;
    g.begin();
    std::printf("sum 2 = %u (%u processes)\n", g.sum, g.procs);
    return 0;
}
