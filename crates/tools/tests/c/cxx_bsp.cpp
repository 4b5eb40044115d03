// BSPlib from C++, built with bspcxx in each dialect (bsp.h, bsp.h with --mcbsp, mcbsp.h
// with -DUSE_MCBSP_H): the headers' declarations in a C++ translation unit, C++ types
// (templates, std::vector, lambdas) in the areas and messages. bulkwire.h is included too,
// to check that it compiles as C++. Usage: cxx_bsp P. Pid 0 prints "cxx ok p=P".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#ifdef USE_MCBSP_H
#include <mcbsp.h>
#else
#include <bsp.h>
#endif
#include <bulkwire.h>

namespace {

[[noreturn]] void fail(int line, const char *what) {
    bsp_abort("C++ check failed at line %d (pid %d): %s", line, static_cast<int>(bsp_pid()),
              what);
}

#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) fail(__LINE__, #cond);                                            \
    } while (0)

// A registered vector of T, popped when it goes out of scope (in the same superstep
// order on every process, as registration demands).
template <typename T>
class Area {
  public:
    explicit Area(std::size_t n, T init = T()) : data_(n, init) {
        bsp_push_reg(data_.data(), static_cast<bsp_size_t>(n * sizeof(T)));
    }
    ~Area() { bsp_pop_reg(data_.data()); }
    Area(const Area &) = delete;
    Area &operator=(const Area &) = delete;

    void put(bsp_pid_t to, const T &v, std::size_t at) {
        bsp_put(to, &v, data_.data(), static_cast<bsp_size_t>(at * sizeof(T)),
                static_cast<bsp_size_t>(sizeof(T)));
    }
    const std::vector<T> &values() const { return data_; }

  private:
    std::vector<T> data_;
};

}  // namespace

int main(int argc, char **argv) {
    bsp_begin(argc > 1 ? static_cast<bsp_pid_t>(std::atoi(argv[1])) : bsp_nprocs());
    const bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    {
        Area<long long> squares(p, -1);
        bsp_sync();
        for (bsp_pid_t q = 0; q < p; q++) squares.put(q, static_cast<long long>(s) * s, s);
        bsp_sync();
        const auto &v = squares.values();
        for (bsp_pid_t q = 0; q < p; q++) EXPECT(v[q] == static_cast<long long>(q) * q);
        const long long sum = std::accumulate(v.begin(), v.end(), 0LL);
        EXPECT(sum == static_cast<long long>(p - 1) * p * (2 * p - 1) / 6);
    }
    bsp_sync();

    // Messages carrying std::string contents, tagged with the sender.
    bsp_size_t tag = sizeof(int);
    bsp_set_tagsize(&tag);
    bsp_sync();
    const std::string hello = "hello from " + std::to_string(s);
    const int me = static_cast<int>(s);
    for (bsp_pid_t q = 0; q < p; q++)
        bsp_send(q, &me, hello.c_str(), static_cast<bsp_size_t>(hello.size()));
    bsp_sync();
    std::vector<std::string> got;
    auto drain = [&got]() {
        void *t, *payload;
        bsp_size_t n;
        while ((n = bsp_hpmove(&t, &payload)) != static_cast<bsp_size_t>(-1))
            got.emplace_back(static_cast<const char *>(payload), n);
    };
    drain();
    EXPECT(got.size() == static_cast<std::size_t>(p));
    for (const auto &m : got) EXPECT(m.rfind("hello from ", 0) == 0);

    if (s == 0) std::printf("cxx ok p=%d\n", static_cast<int>(p));
    bsp_end();
    return 0;
}
