/* main_store_master.c -- the store_master program: parse flags, load the
 * config and plugins, run the master. (Being built up; see README.) */
#include <stdio.h>

int main(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "usage: %s --config FILE [--check]\n", argv[0]);
    return 2;
}
