/* A library planted where the CUDA runtime is searched for: loading it
 * runs its constructor, which creates the file $PLANTED_MARKER.  The tests
 * of the search check that file was never made. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void planted(void)
{
    const char *marker = getenv("PLANTED_MARKER");
    int fd;

    if (marker == NULL)
        return;
    fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
}
