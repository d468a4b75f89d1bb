/* lkns: the namespaces of a labkit `local` instance (see labkit/backends/sandbox.py).
 *
 * lkns hold labkit-holder NAME WORKDIR HOSTS NETNS TMPROOT [+DIR|-DIR ...]   (dirs to hide on stdin)
 *   In network namespace /run/netns/NETNS (unless NETNS is empty; NETNS = +NS: a new one it
 *   makes and binds on /run/netns/NS first, as `ip netns add NS` does), makes new PID, mount and
 *   IPC namespaces (all mounts private; the network namespace's loopback up) and forks their PID 1
 *   (killed with this process, which waits for it), which mounts its own /proc and then, with
 *   mount(2) calls:
 *   1. binds HOSTS (unless empty) on /etc/hosts;
 *   2. gives /tmp and /var/tmp directories of their own: TMPROOT/tmp and TMPROOT/var-tmp bound
 *      there (on disk, as the host's are; TMPROOT empty: a tmpfs each, mode 1777): nothing the
 *      instance writes there reaches the host's, and nothing of the host's is seen;
 *      covers each hidden directory with an empty read-only tmpfs, the same one bound at each
 *      (a hidden file: binds /dev/null on it; a directory that holds WORKDIR: a tmpfs of its own,
 *      read-only once WORKDIR is made in it; a hidden path gone with the private /tmp, or that
 *      is reached through a symbolic link now: nothing; each mount is made on what an openat2
 *      with RESOLVE_NO_SYMLINKS found)
 *      and binds WORKDIR and each +DIR/-DIR that a cover took away back at its path;
 *      replaces /dev by a tmpfs holding only null, zero, full, random, urandom and tty (bound from
 *      the host's), a new devpts instance (ptmx), a private /dev/shm and the fd links;
 *   3. in the instance's own network namespace (NETNS given) lets ports below 1024 be bound
 *      and ICMP echo sockets be opened without a capability;
 *   4. makes every mount read-only except those at or under WORKDIR, /tmp, /var/tmp, /proc,
 *      /dev (its tmpfs itself read-only) and each +DIR (bound on itself first where it is no mount point, with what is
 *      mounted below it); then each -DIR, /proc/sys, /proc/sysrq-trigger, /proc/irq and
 *      /proc/bus read-only too;
 *   5. prints "ready" and reaps orphans forever, its argv still holding "labkit-holder NAME"
 *      (how `cleanup` finds a holder a killed controller left). A PID 1 ignores the signals
 *      it has no handler for (it has one for SIGCHLD only), so the instance cannot stop it.
 *   On error: the reason on stderr, exit status 1.
 *
 * lkns enter PID WORKDIR NET CAPS USERNS -- ARGV...
 *   Writes its pid to each file of $LABKIT_CGROUP_PROCS (exit 125 naming the file if it
 *   cannot; the variable is then removed), enters the mount, IPC, PID (and with NET = 1 network)
 *   namespaces of process PID, goes to WORKDIR, forks, and the child drops its supplementary
 *   groups; with USERNS = BASE:COUNT it makes a new user namespace in which uids and gids
 *   0..COUNT-1 are the host's BASE..BASE+COUNT-1 (the parent, root on the host, writes the
 *   maps) and becomes its uid and gid 0: root inside, an unprivileged id on the host, so no
 *   file, socket or process of the host's root (or of any host user) passes an owner or
 *   group check for it. Then it sets no_new_privs, drops every capability from the bounding
 *   set but CAPS (comma-separated numbers, "" for none; in the user namespace they act only on
 *   what that namespace owns), clears the inheritable and ambient sets and execs ARGV (127: not
 *   found, 126: not executable). The parent exits as the child did (killed by the same
 *   signal). What `sh -c JOIN` + nsenter + unshare + setpriv did, in one exec.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define HIDDEN_OPTIONS "mode=0755,size=16k"

static const char *who = "lkns";

static void die(const char *what, const char *path) {
    fprintf(stderr, "%s: %s %s: %s\n", who, what, path ? path : "", strerror(errno));
    exit(1);
}

static void do_mount(const char *src, const char *target, const char *fs, unsigned long flags,
                     const char *data) {
    if (mount(src, target, fs, flags, data) != 0) {
        fprintf(stderr, "%s: mount %s on %s: %s\n", who, src ? src : "", target, strerror(errno));
        exit(1);
    }
}

static int within(const char *path, const char *parent) {
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') n--;
    if (strncmp(path, parent, n) != 0) return 0;
    return path[n] == '\0' || path[n] == '/' || (n == 1 && parent[0] == '/');
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

struct mnt { char *point; unsigned long flags; };

/* \040 and other octal escapes of a mountinfo path, decoded in place */
static void unescape(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
}

static unsigned long option_flags(char *opts) {
    static const struct { const char *name; unsigned long flag; } known[] = {
        {"ro", MS_RDONLY}, {"nosuid", MS_NOSUID}, {"nodev", MS_NODEV}, {"noexec", MS_NOEXEC},
        {"noatime", MS_NOATIME}, {"nodiratime", MS_NODIRATIME}, {"relatime", MS_RELATIME}};
    unsigned long flags = 0;
    char *save = NULL;
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(o, known[i].name) == 0) flags |= known[i].flag;
    return flags;
}

/* (mount point, per-mount flags) of this mount namespace, in mount order, in *out (the
 * caller frees it with free_mounts); returns the count */
static size_t mounts(struct mnt **out) {
    FILE *fh = fopen("/proc/self/mountinfo", "re");
    if (!fh) die("open", "/proc/self/mountinfo");
    char *line = NULL;
    size_t cap = 0, n = 0, room = 64;
    struct mnt *m = malloc(room * sizeof *m);
    if (!m) die("malloc", NULL);
    while (getline(&line, &cap, fh) > 0) {
        char *save = NULL, *field = strtok_r(line, " ", &save);
        for (int i = 0; i < 4 && field; i++) field = strtok_r(NULL, " ", &save);
        char *opts = field ? strtok_r(NULL, " ", &save) : NULL;
        if (!opts) continue;
        unescape(field);
        if (n == room && !(m = realloc(m, (room *= 2) * sizeof *m))) die("realloc", NULL);
        m[n].point = strdup(field);
        m[n].flags = option_flags(opts);
        n++;
    }
    *out = m;
    free(line);
    fclose(fh);
    return n;
}

static void free_mounts(struct mnt *m, size_t n) {
    for (size_t i = 0; i < n; i++) free(m[i].point);
    free(m);
}

/* the per-mount flags of the mount at `path` that a read-only remount must keep (statvfs(3),
 * without reading mountinfo again) */
static unsigned long path_flags(const char *path) {
    static const struct { unsigned long st, ms; } map[] = {
        {ST_NOSUID, MS_NOSUID}, {ST_NODEV, MS_NODEV}, {ST_NOEXEC, MS_NOEXEC}, {ST_NOATIME, MS_NOATIME},
        {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME}};
    struct statvfs sv;
    unsigned long flags = 0;
    if (statvfs(path, &sv) != 0) die("statvfs", path);
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (sv.f_flag & map[i].st) flags |= map[i].ms;
    return flags;
}

static void read_only(const char *point, unsigned long flags) {
    do_mount(NULL, point, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, NULL);
}

static void mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir", buf);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir", buf);
}

static void write_file(const char *path, const char *value) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value)) die("write", path);
    close(fd);
}

static char **read_lines(size_t *count) {
    size_t cap = 16, n = 0, len = 0;
    char **out = malloc(cap * sizeof *out), *line = NULL;
    ssize_t got;
    while ((got = getline(&line, &len, stdin)) > 0) {
        if (line[got - 1] == '\n') line[got - 1] = '\0';
        if (!line[0]) continue;
        if (n == cap) out = realloc(out, (cap *= 2) * sizeof *out);
        out[n++] = strdup(line);
    }
    free(line);
    *count = n;
    return out;
}

/* bring up the loopback interface of this network namespace (what `ip link set lo up` does) */
static void loopback_up(void) {
    struct ifreq ifr = {0};
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    snprintf(ifr.ifr_name, IFNAMSIZ, "lo");
    if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) die("read flags of", "lo");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) die("bring up", "lo");
    close(fd);
}

/* an O_PATH fd of `path` reached through no symbolic link (a directory another user owns may
 * have become a link to a system directory since labkit resolved it: it is then not covered),
 * -1 if there is none */
static int open_no_links(const char *path) {
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
}

/* a directory fd (O_PATH) of each +DIR/-DIR that exists, -1 for the others: what a cover
 * (the private /tmp, a hidden directory's tmpfs) takes away is bound back from it */
static int *keep_marks(char **marks, int nmarks) {
    int *fds = calloc(nmarks + 1, sizeof *fds);
    if (!fds) die("calloc", NULL);
    for (int i = 0; i < nmarks; i++) fds[i] = open(marks[i] + 1, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return fds;
}

/* bind the directory of `fd` at `path` (made in the cover that took it away) unless `path` is
 * still that directory */
static void bind_back(int fd, const char *path, unsigned long flags) {
    struct stat want, now;
    if (fd < 0 || fstat(fd, &want) != 0) return;
    if (stat(path, &now) == 0 && now.st_dev == want.st_dev && now.st_ino == want.st_ino) return;
    mkdirs(path);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    do_mount(self, path, NULL, MS_BIND | flags, NULL);
}

/* /dev: a tmpfs holding only what a workload needs, the device files bound from the host's
 * (opened before the tmpfs hides them), a devpts of its own, a private /dev/shm */
static void private_dev(void) {
    static const char *const devices[] = {"null", "zero", "full", "random", "urandom", "tty"};
    enum { NDEV = sizeof devices / sizeof devices[0] };
    int fds[NDEV];
    char path[64], self[64];
    for (int i = 0; i < NDEV; i++) {
        snprintf(path, sizeof path, "/dev/%s", devices[i]);
        fds[i] = open(path, O_PATH | O_CLOEXEC);
    }
    do_mount("labkit-dev", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k");
    for (int i = 0; i < NDEV; i++) {
        if (fds[i] < 0) continue;
        snprintf(path, sizeof path, "/dev/%s", devices[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) die("create", path);
        close(fd);
        snprintf(self, sizeof self, "/proc/self/fd/%d", fds[i]);
        do_mount(self, path, NULL, MS_BIND, NULL);
        close(fds[i]);
    }
    if (mkdir("/dev/pts", 0755) != 0 || mkdir("/dev/shm", 01777) != 0) die("mkdir", "/dev/pts, /dev/shm");
    do_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
    do_mount("labkit-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    static const char *const links[][2] = {{"pts/ptmx", "/dev/ptmx"}, {"/proc/self/fd", "/dev/fd"},
        {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (symlink(links[i][0], links[i][1]) != 0) die("symlink", links[i][1]);
    do_mount(NULL, "/dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k");
}

static void setup(const char *workdir, const char *hosts, int netns, const char *tmproot, char **marks,
                  int nmarks, char **hidden, size_t nhidden) {
    struct mnt *m;
    static const char *const ro_proc[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};
    static const char *const private_tmp[][2] = {{"/tmp", "tmp"}, {"/var/tmp", "var-tmp"}};
    int keep = open(workdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (keep < 0) die("open", workdir);
    int *kept = keep_marks(marks, nmarks);
    int tmps[2] = {-1, -1};
    for (int i = 0; i < 2 && tmproot[0]; i++) {   /* opened before /var/tmp (which may hold them) changes */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", tmproot, private_tmp[i][1]);
        if ((tmps[i] = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) die("open", path);
    }
    if (hosts[0]) do_mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL);
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (lstat(private_tmp[i][0], &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (tmps[i] < 0) {
            do_mount("labkit-tmp", private_tmp[i][0], "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
            continue;
        }
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", tmps[i]);
        do_mount(self, private_tmp[i][0], NULL, MS_BIND, NULL);
        close(tmps[i]);
    }
    /* per hidden path: HIDE_FILE (a file: /dev/null bound on it), HIDE_HOLDER (a directory that
     * holds WORKDIR: a writable tmpfs of its own, WORKDIR is made in it; read-only below) or
     * HIDE_DIR (a directory: the one read-only tmpfs, mounted at the first and bound at the others,
     * one mount(2) each, read-only from the start); HIDE_GONE: not there once /tmp is private */
    enum { HIDE_DIR = 0, HIDE_FILE = 1, HIDE_HOLDER = 2, HIDE_GONE = 3 };
    char *file = calloc(nhidden + 1, 1);
    if (!file) die("calloc", NULL);
    const char *shared = NULL;
    for (size_t i = 0; i < nhidden; i++) {
        int fd = open_no_links(hidden[i]);   /* the mount goes on what it found, never through a link */
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) file[i] = HIDE_GONE;
        else file[i] = !S_ISDIR(st.st_mode) ? HIDE_FILE : within(workdir, hidden[i]) ? HIDE_HOLDER : HIDE_DIR;
        char target[64];
        snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
        if (file[i] == HIDE_FILE) do_mount("/dev/null", target, NULL, MS_BIND, NULL);
        else if (file[i] == HIDE_HOLDER)
            do_mount("labkit-hidden", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, HIDDEN_OPTIONS);
        else if (file[i] == HIDE_GONE) ;
        else if (shared) do_mount(shared, target, NULL, MS_BIND, NULL);   /* its flags: read-only, ... */
        else {
            do_mount("labkit-hidden", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                     HIDDEN_OPTIONS);
            shared = hidden[i];
        }
        if (fd >= 0) close(fd);
    }
    mkdirs(workdir);   /* inside a hidden directory or the private /tmp: made in its tmpfs */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", keep);
    do_mount(self, workdir, NULL, MS_BIND, NULL);
    close(keep);
    for (int i = 0; i < nmarks; i++) bind_back(kept[i], marks[i] + 1, MS_REC);
    for (int i = 0; i < nmarks; i++)
        if (kept[i] >= 0) close(kept[i]);
    free(kept);
    private_dev();
    if (netns) {
        write_file("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
        write_file("/proc/sys/net/ipv4/ping_group_range", "0 2147483647");
    }
    const char *writable[3 + nmarks];
    int nw = 0;
    writable[nw++] = workdir;
    writable[nw++] = "/tmp";
    writable[nw++] = "/var/tmp";
    for (int i = 0; i < nmarks; i++)
        if (marks[i][0] == '+') writable[nw++] = marks[i] + 1;
    size_t n = mounts(&m);
    for (int i = 0; i < nw; i++) {
        int point = 0;
        for (size_t j = 0; j < n && !point; j++) point = strcmp(m[j].point, writable[i]) == 0;
        if (!point && is_dir(writable[i])) do_mount(writable[i], writable[i], NULL, MS_BIND | MS_REC, NULL);
    }
    free_mounts(m, n);
    n = mounts(&m);
    for (size_t j = 0; j < n; j++) {
        /* already read-only (the hidden tmpfs, /dev's): nothing to do */
        int skip = (m[j].flags & MS_RDONLY) || within(m[j].point, "/proc") || within(m[j].point, "/dev");
        for (int i = 0; i < nw && !skip; i++) skip = within(m[j].point, writable[i]);
        if (skip) continue;
        if (mount(NULL, m[j].point, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | m[j].flags, NULL) != 0
                && exists(m[j].point)) {   /* else its mount point went meanwhile (a netns deleted) */
            fprintf(stderr, "%s: mount on %s: %s\n", who, m[j].point, strerror(errno));
            exit(1);
        }
    }
    free_mounts(m, n);
    for (size_t i = 0; i < nhidden; i++) {   /* the file system itself, so its copies under /tmp too */
        if (file[i] == HIDE_FILE) read_only(hidden[i], MS_NOSUID | MS_NOEXEC);
        else if (file[i] == HIDE_HOLDER)
            do_mount(NULL, hidden[i], NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, HIDDEN_OPTIONS);
    }
    free(file);
    const char *ro[nmarks + 4];
    int nro = 0;
    for (int i = 0; i < nmarks; i++)
        if (marks[i][0] == '-') ro[nro++] = marks[i] + 1;
    for (int i = 0; i < 4; i++) ro[nro++] = ro_proc[i];
    for (int i = 0; i < nro; i++) {
        if (!exists(ro[i])) continue;
        do_mount(ro[i], ro[i], NULL, MS_BIND, NULL);
        read_only(ro[i], path_flags(ro[i]));
    }
}

static void on_child(int sig) { (void)sig; }

static void reap_forever(void) {
    sigset_t chld, none;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&none);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    struct sigaction sa = {0};
    sa.sa_handler = on_child;   /* a handler, so that SIGCHLD ends sigsuspend */
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) {      /* a PID 1 ignores the signals it has no handler for: the instance cannot stop it */
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        sigsuspend(&none);
    }
}

/* wait for child `pid` and exit as it did (stopped: stop too, then continue it) */
static void exit_as(pid_t pid) {
    int status;
    for (;;) {
        if (waitpid(pid, &status, WUNTRACED) < 0) {
            if (errno == EINTR) continue;
            die("waitpid", NULL);
        }
        if (WIFSTOPPED(status)) {
            kill(getpid(), SIGSTOP);
            kill(pid, SIGCONT);
            continue;
        }
        break;
    }
    if (WIFEXITED(status)) exit(WEXITSTATUS(status));
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    kill(getpid(), sig);
    exit(128 + sig);
}

/* what `ip netns add NAME` does: /run/netns a shared mount point, a new network namespace
 * (this process's from now on) bound on /run/netns/NAME, which must not exist */
static void new_netns(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "/run/netns/%s", name);
    if (mkdir("/run/netns", 0755) != 0 && errno != EEXIST) die("mkdir", "/run/netns");
    while (mount("", "/run/netns", "none", MS_SHARED | MS_REC, NULL) != 0) {
        if (errno != EINVAL) die("make shared", "/run/netns");
        do_mount("/run/netns", "/run/netns", "none", MS_BIND | MS_REC, NULL);   /* a mount point, then */
    }
    int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
    if (fd < 0) die("create network namespace", path);
    close(fd);
    if (unshare(CLONE_NEWNET) != 0) die("unshare", "network namespace");
    do_mount("/proc/self/ns/net", path, "none", MS_BIND, NULL);
}

static int hold(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: lkns hold MARKER NAME WORKDIR HOSTS NETNS TMPROOT [+DIR|-DIR ...]\n");
        return 2;
    }
    const char *workdir = argv[4], *hosts = argv[5], *netns = argv[6], *tmproot = argv[7];
    static char name[4096];
    snprintf(name, sizeof name, "%s %s", argv[2], argv[3]);
    who = name;
    size_t nhidden;
    char **hidden = read_lines(&nhidden);
    if (netns[0] == '+') {
        new_netns(netns + 1);
        loopback_up();
    } else if (netns[0]) {
        char path[4096];
        snprintf(path, sizeof path, "/run/netns/%s", netns);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die("enter network namespace", path);
        close(fd);
        loopback_up();
    }
    if (unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC) != 0) die("unshare", "pid, mount and IPC namespaces");
    do_mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid > 0) {
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; fd++) dup2(null, fd);
        exit_as(pid);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("tie to parent", NULL);
    do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL);
    setup(workdir, hosts, strcmp(netns, "") != 0, tmproot, argv + 8, argc - 8, hidden, nhidden);
    printf("ready\n");
    fflush(stdout);
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    if (null > 2) close(null);
    reap_forever();
    return 0;
}

/* Join each cgroup of $LABKIT_CGROUP_PROCS (cgroup.procs files). On a v1 hierarchy (a `tasks`
 * file beside it) by writing "0" to `tasks`: this process has one thread, so that moves it whole,
 * and the kernel then skips the global threadgroup lock that a write to cgroup.procs takes, whose
 * RCU grace period cost 8-23 ms per command (the first join after an idle spell). */
static void join_cgroup(void) {
    const char *files = getenv("LABKIT_CGROUP_PROCS");
    if (!files) return;
    char *copy = strdup(files), *save = NULL, pid[32], tasks[4096];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    static const char procs[] = "/cgroup.procs";
    for (char *f = strtok_r(copy, " ", &save); f; f = strtok_r(NULL, " ", &save)) {
        size_t n = strlen(f), k = sizeof procs - 1;
        const char *target = f, *value = pid;
        if (n > k && n - k + sizeof "/tasks" <= sizeof tasks && strcmp(f + n - k, procs) == 0) {
            snprintf(tasks, sizeof tasks, "%.*s/tasks", (int)(n - k), f);
            if (access(tasks, F_OK) == 0) { target = tasks; value = "0\n"; }
        }
        int fd = open(target, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, value, strlen(value)) < 0) {
            fprintf(stderr, "labkit-join: cannot join %s (writing %s): %s\n", f, target, strerror(errno));
            exit(125);
        }
        close(fd);
    }
    free(copy);
    unsetenv("LABKIT_CGROUP_PROCS");
}

static void drop_capabilities(const char *keep) {
    unsigned long long kept = 0;
    char *copy = strdup(keep), *save = NULL;
    for (char *c = strtok_r(copy, ",", &save); c; c = strtok_r(NULL, ",", &save)) kept |= 1ULL << atoi(c);
    free(copy);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("set", "no_new_privs");
    for (int cap = 0; cap < 64; cap++) {
        if (kept & (1ULL << cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("drop capability", NULL);
    }
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &head, data) != 0) die("capget", NULL);
    data[0].inheritable = data[1].inheritable = 0;
    if (syscall(SYS_capset, &head, data) != 0) die("capset", NULL);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        die("clear", "ambient capabilities");
}

static void write_at(int dir, const char *name, const char *value) {
    int fd = openat(dir, name, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value)) die("write", name);
    close(fd);
}

/* the child's side of USERNS: a new user namespace whose maps the parent writes (it says when
 * on `go`), then its uid and gid 0 there */
static void become_namespace_root(int ready, int go) {
    char byte = 0;
    if (setgroups(0, NULL) != 0) die("drop", "supplementary groups");
    if (unshare(CLONE_NEWUSER) != 0) die("unshare", "user namespace");
    if (write(ready, "u", 1) != 1 || read(go, &byte, 1) != 1 || byte != 'm') {
        fprintf(stderr, "lkns: the user namespace's maps were not written\n");
        exit(125);
    }
    close(ready);
    close(go);
    if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) die("become", "the user namespace's root");
    if (setgroups(0, NULL) != 0) die("drop", "supplementary groups in the user namespace");
}

/* the parent's side: write the uid and gid maps of child `pid` (found through `procfd`, the
 * host's /proc opened before the mount namespace changed it) */
static void map_namespace(int procfd, pid_t pid, const char *base, const char *count, int ready, int go) {
    char byte = 0, name[64], map[96];
    if (read(ready, &byte, 1) != 1 || byte != 'u') {
        close(go);
        exit_as(pid);   /* it failed before: it said why */
    }
    snprintf(map, sizeof map, "0 %s %s\n", base, count);
    snprintf(name, sizeof name, "%d/uid_map", (int)pid);
    write_at(procfd, name, map);
    snprintf(name, sizeof name, "%d/gid_map", (int)pid);
    write_at(procfd, name, map);
    if (write(go, "m", 1) != 1) die("write", "to the command");
    close(ready);
    close(go);
}

static int enter(int argc, char **argv) {
    if (argc < 9 || strcmp(argv[7], "--") != 0) {
        fprintf(stderr, "usage: lkns enter PID WORKDIR NET CAPS USERNS -- ARGV...\n");
        return 2;
    }
    const char *target = argv[2], *workdir = argv[3], *caps = argv[5], *userns = argv[6];
    int net = strcmp(argv[4], "1") == 0;
    char base[32] = "", count[32] = "";
    if (userns[0] && (sscanf(userns, "%31[0-9]:%31[0-9]", base, count) != 2)) {
        fprintf(stderr, "lkns: USERNS %s: give BASE:COUNT\n", userns);
        return 2;
    }
    join_cgroup();
    static const struct { const char *file; int type; } spaces[] = {
        {"net", CLONE_NEWNET}, {"ipc", CLONE_NEWIPC}, {"pid_for_children", CLONE_NEWPID}, {"mnt", CLONE_NEWNS}};
    enum { NSPACES = sizeof spaces / sizeof spaces[0] };
    int fds[NSPACES];
    for (int i = 0; i < NSPACES; i++) {   /* all opened first: /proc is another one once in the mount namespace */
        char path[128];
        snprintf(path, sizeof path, "/proc/%s/ns/%s", target, spaces[i].file);
        fds[i] = (i == 0 && !net) ? -1 : open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0 && !(i == 0 && !net)) die("open", path);
    }
    int procfd = base[0] ? open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    if (base[0] && procfd < 0) die("open", "/proc");
    for (int i = 0; i < NSPACES; i++) {
        if (fds[i] < 0) continue;
        if (setns(fds[i], spaces[i].type) != 0) die("enter namespace", spaces[i].file);
        close(fds[i]);
    }
    if (chdir(workdir) != 0) die("chdir", workdir);
    int up[2] = {-1, -1}, down[2] = {-1, -1};   /* child -> parent: "u" (unshared); parent -> child: "m" (mapped) */
    if (base[0] && (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0)) die("pipe", NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid > 0) {
        if (base[0]) {
            close(up[1]);
            close(down[0]);
            map_namespace(procfd, pid, base, count, up[0], down[1]);
            close(procfd);
        }
        exit_as(pid);
    }
    if (base[0]) {
        close(up[0]);
        close(down[1]);
        close(procfd);
        become_namespace_root(up[1], down[0]);
    } else if (setgroups(0, NULL) != 0) {
        die("drop", "supplementary groups");
    }
    drop_capabilities(caps);
    execvp(argv[8], argv + 8);
    int err = errno;
    fprintf(stderr, "lkns: failed to execute %s: %s\n", argv[8], strerror(err));
    return err == ENOENT ? 127 : 126;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "hold") == 0) return hold(argc, argv);
    if (argc > 1 && strcmp(argv[1], "enter") == 0) return enter(argc, argv);
    fprintf(stderr, "usage: lkns hold ... | lkns enter ...\n");
    return 2;
}
