/*
 * bsp.hpp: MulticoreBSP for C's C++ interface, for bulkwire.
 *
 * A BSP program is a class deriving from mcbsp::BSP_program that defines
 *
 *     virtual void spmd();                 the SPMD section, with any BSPlib call
 *     virtual BSP_program *newInstance();  a fresh object of the class, for a process
 *
 * and is started with begin(P) (P processes) or begin() (bsp_nprocs() of them):
 *
 *     class Hello : public mcbsp::BSP_program {
 *       protected:
 *         void spmd() { std::printf("hello from %u\n", bsp_pid()); }
 *         BSP_program *newInstance() { return new Hello(); }
 *     };
 *     int main() { Hello h; h.begin(2); h.begin(); }
 *
 * Build with bspcxx (bspcxx --mcbsp, or bspcxx alone: this header selects MulticoreBSP's
 * dialect when bsp.h was not included before it) and run the program by itself or with
 * bsprun.
 *
 * Semantics, over processes (MulticoreBSP runs threads): begin(P) names the section's
 * function with bsp_init and calls it, as a C program does; the function calls
 * bsp_begin(P), runs spmd() and bsp_end(). Pid 0 runs spmd() on the object begin() was
 * called on, so what it stores there is there after begin() returns. Every other pid is
 * a process running a copy of the program: it runs main up to the same begin() call, then
 * spmd() on an object newInstance() made from its copy of that object, and ends at the
 * section's bsp_end. So the code of main before begin() runs there too, but must not call
 * BSPlib (bsp_nprocs included) before begin(): such a process stops with a message saying
 * so. begin() may be called again after it returns (a later section), and inside spmd()
 * (a nested section of which the calling process is pid 0).
 */
#ifndef BULKWIRE_BSP_HPP
#define BULKWIRE_BSP_HPP

#if !defined(BULKWIRE_BSP_H) && !defined(BULKWIRE_MCBSP)
#define BULKWIRE_MCBSP 1
#endif
#include "bsp.h"

#include <cstdio>
#include <cstdlib>

namespace mcbsp {

class BSP_program {
  protected:
    /* The SPMD section: runs on every process between bsp_begin and bsp_end. */
    virtual void spmd(void) = 0;

    /* A new object of the derived class, for a process other than pid 0 (deleted after
     * its spmd() returns). */
    virtual BSP_program *newInstance(void) = 0;

  public:
    BSP_program() {}
    virtual ~BSP_program() {}

    /* Runs spmd() on P processes; returns on pid 0 after the section's bsp_end. */
    void begin(unsigned int P) {
        /* Set before the first BSPlib call: that is where the other processes branch
         * into the section (their copy of main got here the same way). */
        program() = this;
        processes() = P;
        bsp_init(&BSP_program::section, 0, NULL);
        section();
    }

    /* Runs spmd() on as many processes as bsp_nprocs() gives before the section. */
    void begin(void) {
        program() = this;
        begin(static_cast<unsigned int>(bsp_nprocs()));
    }

  private:
    /* The object and process count of the section begun last, in this process. Function
     * statics: one per program whichever translation units include this header. */
    static BSP_program *&program() {
        static BSP_program *p = NULL;
        return p;
    }

    static unsigned int &processes() {
        static unsigned int n = 0;
        return n;
    }

    /* The function bsp_init names: what every process of the section runs. */
    static void section(void) {
        BSP_program *const initiator = program();
        if (initiator == NULL) {
            std::fputs("bsp.hpp: this process was started for an SPMD section of a "
                       "mcbsp::BSP_program, but its copy of main called BSPlib before "
                       "BSP_program::begin (the other processes run main up to begin: "
                       "call no BSPlib function before it)\n",
                       stderr);
            std::exit(EXIT_FAILURE);
        }
        /* Only pid 0's count is used: the others pass theirs, as in C. */
        bsp_begin(processes());
        if (bsp_pid() == 0) {
            initiator->spmd();
        } else {
            BSP_program *const mine = initiator->newInstance();
            mine->spmd();
            delete mine;
        }
        bsp_end();
    }
};

} /* namespace mcbsp */

#endif /* BULKWIRE_BSP_HPP */
