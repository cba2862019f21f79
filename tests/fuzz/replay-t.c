/*
 * The fuzz target's body, tests/fuzz/fuzz-convert.c, over every file of the
 * seed corpus (and over any files named on the command line, such as a
 * crashing input libFuzzer kept): a TAP test for `make check` that needs no
 * clang.  A broken promise aborts in the body, so the last "# replaying"
 * line names the input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap/basic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads path whole into a malloc'ed buffer; NULL when it cannot. */
static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    } else if (buf != NULL) {
        *size = (size_t)n;
    }
    fclose(f);
    return buf;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay(const char *path, const char *name)
{
    size_t size = 0;
    uint8_t *buf = slurp(path, &size);

    if (buf == NULL) {
        ok(0, "replay %s: cannot read %s", name, path);
        return;
    }
    diag("replaying %s (%lu bytes)", name, (unsigned long)size);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    ok(1, "replay %s: every checked promise held", name);
}

int main(int argc, char **argv)
{
    const char *srcdir = getenv("srcdir");
    char dir[4096], path[4200];
    char *names[4096];
    size_t n = 0, i;
    struct dirent *e;
    DIR *d;

    if (argc > 1) {
        plan((unsigned long)argc - 1);
        for (i = 1; i < (size_t)argc; i++)
            replay(argv[i], argv[i]);
        return 0;
    }
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus",
             srcdir != NULL ? srcdir : ".");
    d = opendir(dir);
    if (d == NULL)
        bail("cannot open the corpus %s", dir);
    while ((e = readdir(d)) != NULL && n < sizeof names / sizeof names[0])
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], by_name);
    /* The corpus has 16 seeds at least: fewer means it was not found. */
    plan(n + 1);
    ok(n >= 16, "the corpus %s holds %lu inputs", dir, (unsigned long)n);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        replay(path, names[i]);
        free(names[i]);
    }
    return 0;
}
