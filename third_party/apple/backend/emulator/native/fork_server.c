/* A compiler that stays loaded: preloaded (LD_PRELOAD) into clang or ld.lld started with TT_FORK_SERVER=1, it
 * takes over before the tool's main, after the dynamic loader has mapped and relocated the tool's libraries
 * (libLLVM, libclang-cpp: about 20 ms of CPU per clang start, 12 ms per ld.lld start). It then serves requests on
 * stdin: for each, it forks, and the child runs the tool's own main with the request's arguments, environment and
 * working directory, as a fresh process of the tool would; its output goes to memory files the server returns.
 * Linux (glibc) only: emulator/fork_server.py.
 *
 * Hello, written once at start: "TTFS", u32 length, the path of the running executable (/proc/self/exe), so the
 * client knows the preload took effect in the tool it meant.
 * Request: u32 size of what follows, u32 argc, u32 envc, then NUL-terminated strings: working directory, argc
 * arguments, envc "NAME=value" entries.
 * Reply: i32 kind (0: the tool ran; 1: its child could not start it, e.g. the directory is gone; 2: fork failed),
 * i32 status (the exit code, or minus the signal, as Python's subprocess reports it), f64 user and system seconds
 * of the child, f64 user and system seconds of the server itself so far (forking a process that maps libLLVM is
 * not free), u32 stdout length, u32 stderr length, then those bytes.
 * End of input (the client closed the pipe, or exited) ends the server. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
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

/* The contents of memory file `fd` (malloc'ed, *len set), or NULL. */
static char *contents(int fd, uint32_t *len) {
  off_t size = lseek(fd, 0, SEEK_END);
  *len = 0;
  if (size <= 0 || size > 0x7fffffff || lseek(fd, 0, SEEK_SET) != 0)
    return NULL;
  char *buf = (char *)malloc((size_t)size);
  if (!buf || read_all(fd, buf, (size_t)size)) {
    free(buf);
    return NULL;
  }
  *len = (uint32_t)size;
  return buf;
}

static void serve(start_fn real, main_fn main, void (*init)(void), void (*fini)(void), void (*rtld_fini)(void),
                  void *stack_end) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  uint32_t exe_len = n > 0 ? (uint32_t)n : 0;
  if (write_all(1, "TTFS", 4) || write_all(1, &exe_len, 4) || write_all(1, exe, exe_len))
    _exit(0);
  for (;;) {
    uint32_t head[3];
    if (read_all(0, head, sizeof head))
      _exit(0);
    uint32_t size = head[0], nargs = head[1], nenv = head[2];
    if (size > (1u << 26) || nargs > size || nenv > size)
      _exit(1); /* not a request this client sends */
    char *buf = (char *)malloc((size_t)size + 1);
    char **vec = (char **)malloc(sizeof(char *) * ((size_t)nargs + nenv + 2));
    if (!buf || !vec || read_all(0, buf, size))
      _exit(1);
    buf[size] = 0;
    char *p = buf, *end = buf + size;
    char *cwd = p;
    p += strlen(p) + 1;
    uint64_t i = 0;
    for (; i < (uint64_t)nargs + nenv && p < end; ++i) {
      vec[i + (i >= nargs ? 1 : 0)] = p;
      p += strlen(p) + 1;
    }
    if (i != (uint64_t)nargs + nenv || nargs == 0)
      _exit(1);
    char **args = vec, **env = vec + nargs + 1;
    args[nargs] = NULL;
    env[nenv] = NULL;
    int out = memfd_create("tt-stdout", MFD_CLOEXEC), err = memfd_create("tt-stderr", MFD_CLOEXEC);
    pid_t parent = getpid();
    pid_t pid = (out >= 0 && err >= 0) ? fork() : -1;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* a server that dies takes its build along: none runs on unseen */
      if (getppid() != parent)
        _exit(126);
      if (chdir(cwd) || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(126);
      int null = open("/dev/null", O_RDONLY); /* the tool reads no input; fd 0 was the request pipe */
      if (null < 0 || dup2(null, 0) < 0)
        _exit(126);
      if (null != 0)
        close(null);
      environ = env;
      real(main, (int)nargs, args, init, fini, rtld_fini, stack_end);
      _exit(126); /* __libc_start_main does not return */
    }
    int32_t reply[2] = {2, 0};
    struct rusage usage, self;
    memset(&usage, 0, sizeof usage);
    memset(&self, 0, sizeof self);
    if (pid > 0) {
      int status = 0;
      if (wait4(pid, &status, 0, &usage) == pid) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 126) {
          uint32_t errlen;
          char *text = contents(err, &errlen);
          reply[0] = errlen ? 0 : 1; /* 126 without a word: the child could not start the tool */
          free(text);
        } else {
          reply[0] = 0;
        }
        reply[1] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
    }
    getrusage(RUSAGE_SELF, &self);
    double times[4] = {usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
                       usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6,
                       self.ru_utime.tv_sec + self.ru_utime.tv_usec / 1e6,
                       self.ru_stime.tv_sec + self.ru_stime.tv_usec / 1e6};
    uint32_t lens[2] = {0, 0};
    char *texts[2] = {NULL, NULL};
    if (reply[0] == 0) {
      texts[0] = contents(out, &lens[0]);
      texts[1] = contents(err, &lens[1]);
    }
    if (out >= 0)
      close(out);
    if (err >= 0)
      close(err);
    free(buf);
    free(vec);
    if (write_all(1, reply, sizeof reply) || write_all(1, times, sizeof times) || write_all(1, lens, sizeof lens) ||
        (lens[0] && write_all(1, texts[0], lens[0])) || (lens[1] && write_all(1, texts[1], lens[1])))
      _exit(0);
    free(texts[0]);
    free(texts[1]);
  }
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
  start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
  if (!real)
    abort();
  const char *want = getenv("TT_FORK_SERVER");
  if (want && strcmp(want, "1") == 0)
    serve(real, main, init, fini, rtld_fini, stack_end);
  return real(main, argc, argv, init, fini, rtld_fini, stack_end); /* not asked to serve: the tool as usual */
}
