/* A compiler that stays loaded: preloaded (LD_PRELOAD) into clang or ld.lld started with TT_FORK_SERVER=1, it
 * takes over before the tool's main, after the dynamic loader has mapped and relocated the tool's libraries
 * (libLLVM, libclang-cpp: about 20 ms of CPU per clang start, 12 ms per ld.lld start). It then serves requests on
 * stdin: for each, it forks, and the child runs the tool's own main with the request's arguments, environment and
 * working directory, its output going to the request's files, exactly as a fresh process of the tool would. The
 * reply on stdout is the child's exit status and CPU time. Linux (glibc) only: emulator/fork_server.py.
 *
 * Request: u32 size of what follows, u32 argc, u32 envc, then NUL-terminated strings: working directory, stdout
 * file, stderr file, argc arguments, envc "NAME=value" entries.
 * Reply: i32 status (the exit code, or 128 + the signal), f64 user and system seconds of the child, f64 user and
 * system seconds of the server itself so far (forking a process that maps libLLVM is not free).
 * End of input (the client closed the pipe, or exited) ends the server. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

static int read_all(int fd, void *buf, size_t n) {
  char *p = (char *)buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r <= 0)
      return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = (const char *)buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int redirect(const char *path, int fd) {
  int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (f < 0 || dup2(f, fd) < 0)
    return -1;
  close(f);
  return 0;
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
  start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  const char *serve = getenv("TT_FORK_SERVER");
  if (!real || !serve || strcmp(serve, "1") != 0) /* not asked to serve: the tool runs as usual */
    return real(main, argc, argv, init, fini, rtld_fini, stack_end);
  for (;;) {
    uint32_t head[3];
    if (read_all(0, head, sizeof head))
      _exit(0);
    uint32_t size = head[0], nargs = head[1], nenv = head[2];
    char *buf = (char *)malloc((size_t)size + 1);
    char **vec = (char **)malloc(sizeof(char *) * ((size_t)nargs + nenv + 2));
    if (!buf || !vec || read_all(0, buf, size))
      _exit(1);
    buf[size] = 0;
    char *p = buf, *end = buf + size;
    char *fields[3];
    for (int i = 0; i < 3; ++i) {
      fields[i] = p;
      p += strlen(p) + 1;
    }
    uint32_t i = 0;
    for (; i < nargs + nenv && p < end; ++i) {
      vec[i + (i >= nargs ? 1 : 0)] = p;
      p += strlen(p) + 1;
    }
    if (i != nargs + nenv)
      _exit(1);
    char **args = vec, **env = vec + nargs + 1;
    args[nargs] = NULL;
    env[nenv] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
      if (chdir(fields[0]) || redirect(fields[1], 1) || redirect(fields[2], 2))
        _exit(127);
      close(0);
      open("/dev/null", O_RDONLY); /* the tool reads no input; fd 0 is the request pipe */
      environ = env;
      return real(main, (int)nargs, args, init, fini, rtld_fini, stack_end);
    }
    int status = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    int32_t rc = 126;
    if (pid > 0 && wait4(pid, &status, 0, &usage) == pid)
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    struct rusage self;
    memset(&self, 0, sizeof self);
    getrusage(RUSAGE_SELF, &self);
    double times[4] = {usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
                       usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6,
                       self.ru_utime.tv_sec + self.ru_utime.tv_usec / 1e6,
                       self.ru_stime.tv_sec + self.ru_stime.tv_usec / 1e6};
    free(buf);
    free(vec);
    if (write_all(1, &rc, sizeof rc) || write_all(1, times, sizeof times))
      _exit(0);
  }
}
