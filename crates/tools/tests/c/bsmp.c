/* BSMP conformance: bsp_set_tagsize, bsp_send, bsp_hpsend, bsp_qsize, bsp_get_tag,
 * bsp_move, bsp_hpmove. Usage: bsmp [P]. Pid 0 prints "bsmp ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv) {
    bsp_begin(argc > 1 ? atoi(argv[1]) : (int)bsp_nprocs());
    bsp_pid_t p = bsp_nprocs(), s = bsp_pid();
    bsp_nprocs_t nmsg = 5;
    bsp_size_t nbytes = 5, status = 5;

    /* The queue starts empty; the tag size starts at 0. */
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, 0);
    CHECK_EQ(nbytes, 0);
    bsp_get_tag(&status, NULL);
    CHECK(status == NO_MESSAGE);

    /* set_tagsize returns the size in effect; the new one applies from the next
     * superstep, so these sends still have no tag. */
    bsp_size_t ts = sizeof(int);
    bsp_set_tagsize(&ts);
    CHECK_EQ(ts, 0);
    char text[64];
    for (bsp_pid_t q = 0; q < p; q++) {
        int len = snprintf(text, sizeof text, "hello %d from %d", (int)q, (int)s);
        bsp_send(q, NULL, text, len + 1);
    }
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, 0); /* readable in the next superstep only */
    bsp_sync();
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, p);
    int want_bytes = 0;
    for (bsp_pid_t q = 0; q < p; q++)
        want_bytes += snprintf(text, sizeof text, "hello %d from %d", (int)s, (int)q) + 1;
    CHECK_EQ(nbytes, want_bytes);
    unsigned seen = 0;
    for (;;) {
        bsp_get_tag(&status, NULL);
        if (status == NO_MESSAGE) break;
        char got[64];
        CHECK((size_t)status <= sizeof got);
        bsp_move(got, sizeof got);
        int from = -1, to = -1;
        CHECK_EQ(sscanf(got, "hello %d from %d", &to, &from), 2);
        CHECK_EQ(to, s);
        CHECK(from >= 0 && from < (int)p);
        CHECK_EQ(status, strlen(got) + 1);
        seen |= 1u << (from % 30);
        bsp_qsize(&nmsg, &nbytes);
    }
    CHECK_EQ(nmsg, 0);
    CHECK_EQ(nbytes, 0);

    /* Now 4-byte tags: tag = sender * 1000 + receiver, payload = sender+1 doubles.
     * Several calls in one superstep chain: each returns what the previous asked for. */
    ts = 8;
    bsp_set_tagsize(&ts);
    CHECK_EQ(ts, 4); /* the size in effect now */
    ts = sizeof(int);
    bsp_set_tagsize(&ts); /* changed our mind: back to 4 */
    CHECK_EQ(ts, 8);
    for (bsp_pid_t q = 0; q < p; q++) {
        int tag = (int)(s * 1000 + q);
        double d[64];
        for (bsp_pid_t i = 0; i <= s % 64; i++) d[i] = s + i * 0.5;
        bsp_send(q, &tag, d, (s % 64 + 1) * sizeof(double));
    }
    /* A zero-length payload, and one to ourselves with hpsend. */
    int ztag = -(int)s - 1;
    bsp_send((s + 1) % p, &ztag, NULL, 0);
    static char hp[100000];
    for (int i = 0; i < (int)sizeof hp; i++) hp[i] = (char)(i + s);
    int hptag = 424242;
    bsp_hpsend(s, &hptag, hp, sizeof hp);
    bsp_sync();
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, p + 2);
    int count = 0, zeros = 0, hps = 0;
    void *tagp, *payp;
    bsp_size_t len;
    while ((len = bsp_hpmove(&tagp, &payp)) != NO_MESSAGE) {
        int tag;
        memcpy(&tag, tagp, sizeof tag);
        if (tag == 424242) {
            CHECK_EQ(len, sizeof hp);
            for (bsp_size_t i = 0; i < len; i++)
                if (((char *)payp)[i] != (char)(i + s)) CHECK_EQ(i, -1);
            hps++;
        } else if (tag < 0) {
            CHECK_EQ(len, 0);
            CHECK_EQ(-tag - 1, (s + p - 1) % p);
            zeros++;
        } else {
            int from = tag / 1000;
            CHECK_EQ(tag % 1000, s);
            CHECK_EQ(len, (from % 64 + 1) * sizeof(double));
            double d;
            memcpy(&d, (char *)payp + len - sizeof d, sizeof d);
            CHECK(d == from + (from % 64) * 0.5);
            count++;
        }
    }
    CHECK_EQ(count, p);
    CHECK_EQ(zeros, 1);
    CHECK_EQ(hps, 1);

    /* bsp_move copies at most reception_nbytes; get_tag then shows the next message. */
    int t1 = 1;
    bsp_send(s, &t1, "0123456789", 10);
    bsp_send(s, &t1, "abc", 3);
    bsp_sync();
    char small[4] = {'x', 'x', 'x', 'x'};
    int tag = 0;
    bsp_get_tag(&status, &tag);
    CHECK_EQ(tag, 1);
    CHECK(status == 10 || status == 3);
    bsp_size_t first = status;
    bsp_move(small, 2);
    CHECK(small[2] == 'x');
    CHECK(small[0] == (first == 10 ? '0' : 'a'));
    bsp_get_tag(&status, &tag);
    CHECK_EQ(status, first == 10 ? 3 : 10);

    /* Messages not read are gone after the next sync. */
    bsp_send((s + 1) % p, &t1, "x", 1);
    bsp_sync();
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, 1);
    bsp_sync();
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, 0);

    /* Large messages and many small ones in one superstep. */
    int bigtag = 7;
    char *bigmsg = malloc(300000);
    memset(bigmsg, 'b', 300000);
    bsp_send((s + 1) % p, &bigtag, bigmsg, 300000);
    for (int i = 0; i < 500; i++) bsp_send((s + i) % p, &i, &s, sizeof s);
    bsp_sync();
    int small_n = 0, big_n = 0;
    while ((len = bsp_hpmove(&tagp, &payp)) != NO_MESSAGE) {
        if (len == 300000) {
            big_n++;
            CHECK(((char *)payp)[299999] == 'b');
        } else {
            bsp_pid_t from;
            int i;
            memcpy(&from, payp, sizeof from);
            memcpy(&i, tagp, sizeof i);
            CHECK_EQ((from + i) % p, s);
            small_n++;
        }
    }
    CHECK_EQ(big_n, 1);
    int expect_small = 0;
    for (bsp_pid_t q = 0; q < p; q++)
        for (int i = 0; i < 500; i++) expect_small += (q + i) % p == s;
    CHECK_EQ(small_n, expect_small);

    /* The tag size back to 0. With tags and payloads of 0 bytes nothing is read or
     * written: NULL is fine for all of them. */
    ts = 0;
    bsp_set_tagsize(&ts);
    CHECK_EQ(ts, 4);
    bsp_sync();
    bsp_send(s, NULL, "z", 1);
    bsp_send(s, NULL, NULL, 0);
    bsp_sync();
    bsp_qsize(&nmsg, &nbytes);
    CHECK_EQ(nmsg, 2);
    CHECK_EQ(nbytes, 1);
    for (int k = 0; k < 2; k++) {
        bsp_get_tag(&status, NULL);
        CHECK(status == 0 || status == 1);
        bsp_move(NULL, 0);
    }
    bsp_get_tag(&status, NULL);
    CHECK(status == NO_MESSAGE);

    if (s == 0) printf("bsmp ok p=%d\n", (int)p);
    bsp_end();
    return 0;
}
