/* labkit-guest-helper: the two things a minbase Debian guest cannot do without kmod/iproute2.
 *
 *   labkit-guest-helper insmod FILE.ko    load a kernel module (finit_module)
 *   labkit-guest-helper lo-up             bring the loopback interface up
 *
 * Compiled statically on the controller by labkit.images.vm and copied into
 * the VM image as /sbin/labkit-guest-helper; run by /sbin/labkit-init at boot.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int do_insmod(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { perror(path); return 1; }
    if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST) {
        perror("finit_module");
        close(fd);
        return 1;
    }
    close(fd);
    return 0;
}

static int do_lo_up(void) {
    struct ifreq ifr;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) { perror("socket"); return 1; }
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) { perror("SIOCGIFFLAGS"); close(s); return 1; }
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) { perror("SIOCSIFFLAGS"); close(s); return 1; }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "insmod") == 0) return do_insmod(argv[2]);
    if (argc == 2 && strcmp(argv[1], "lo-up") == 0) return do_lo_up();
    fprintf(stderr, "usage: %s insmod FILE.ko | lo-up\n", argv[0]);
    return 2;
}
