#!/usr/bin/env python3
"""Documentation test: the examples in README.md, docs/ and bench/README.md.

    test_docs.py SRC_DIR BUILD_DIR SLUICE_BIN [SANITIZE]

The rules (written for authors in docs/README.md, "Examples in these pages"):
  - every fenced block names its language: c, sh, console, text, meson, yaml,
    ini, nginx or haproxy;
  - a ```c block with a main() is a whole program: it is compiled and linked
    against the public headers and the built library; any other ```c block is
    a fragment of top-level declarations, compiled alone after
    #include <sluice/sluice.h> and the C of a <!-- c-context ... --> comment
    placed right before the fence;
  - a ```c block preceded by <!-- c-file: PATH --> must also be PATH's text
    from its first #include on (a program the project builds, shown whole);
  - a ```sh or ```console block is preceded by <!-- illustrative --> (shown,
    not run: it needs a Redis of yours, an installed sluice, root or time) or
    by <!-- run --> (a ```console transcript this test runs: each "$ "
    command goes to bash in a temporary directory, with the built sluice on
    PATH and SLUICE_REDIS naming a private redis-server, and its output must
    be the lines shown up to the next "$ ").
SANITIZE is the build's b_sanitize: programs link with the same runtime.
Prints TAP.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r'^```(\S*)\s*$')
MARK = re.compile(r'^<!--\s*(illustrative|run)\s*-->$')
CFILE = re.compile(r'^<!--\s*c-file:\s*(\S+)\s*-->$')
LANGS = {'c', 'sh', 'console', 'text', 'meson', 'yaml', 'ini', 'nginx', 'haproxy'}
STEP = '@@sluice-docs-step@@'


def blocks(path):
    """Yield (line, lang, marker, context, body) for each fenced block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j] != '```':
            j += 1
        marker, context = preceding_comment(lines, start)
        yield start + 1, lang, marker, context, '\n'.join(lines[start + 1:j]) + '\n'
        i = j + 1


def preceding_comment(lines, start):
    """The marker or the c-context of the HTML comment right before a fence."""
    k = start - 1
    if k < 0 or not lines[k].rstrip().endswith('-->'):
        return None, ''
    m = MARK.match(lines[k].strip())
    if m:
        return m.group(1), ''
    m = CFILE.match(lines[k].strip())
    if m:
        return 'c-file', m.group(1)
    first = k
    while first >= 0 and not lines[first].startswith('<!--'):
        first -= 1
    if first >= 0 and lines[first].startswith('<!-- c-context'):
        return 'c-context', '\n'.join(lines[first + 1:k]) + '\n'
    return None, ''


class Tap:
    def __init__(self):
        self.n, self.failed = 0, 0

    def result(self, ok, what, detail=''):
        self.n += 1
        print(('ok' if ok else 'not ok') + ' %d - %s' % (self.n, what))
        if not ok:
            self.failed += 1
            for line in detail.rstrip().split('\n'):
                print('#   ' + line)


def compile_c(src, build, body, context, whole, tmp, sanitize):
    cc = os.environ.get('CC') or shutil.which('cc') or 'gcc'
    path = os.path.join(tmp, 'snippet.c')
    with open(path, 'w') as f:
        if not whole:
            f.write('#include <sluice/sluice.h>\n' + context)
        f.write(body)
    flags = ['-std=c11', '-Wall', '-Wextra', '-Werror', '-Wno-unused-parameter',
             '-Wno-unused-function', '-I' + os.path.join(src, 'include')]
    if sanitize not in ('', 'none'):
        flags.append('-fsanitize=' + sanitize)
    if whole:
        cmd = [cc] + flags + [path, '-o', os.path.join(tmp, 'snippet'),
                              '-L' + os.path.join(build, 'src'), '-lsluice', '-levent_core',
                              '-levent', '-Wl,-rpath,' + os.path.join(build, 'src')]
    else:
        cmd = [cc] + flags + ['-c', path, '-o', os.path.join(tmp, 'snippet.o')]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def same_as_file(src, rel, body):
    """A block marked <!-- c-file: PATH -->: PATH from its first #include on."""
    text = open(os.path.join(src, rel), encoding='utf-8').read()
    start = text.find('#include')
    if text[start:] == body:
        return True, ''
    import difflib
    diff = difflib.unified_diff(text[start:].split('\n'), body.split('\n'), rel, 'the block',
                                lineterm='')
    return False, '\n'.join(diff)


class Redis:
    """A private redis-server on a unix socket, started on first use."""
    def __init__(self, tmp):
        self.tmp, self.proc, self.url = tmp, None, None

    def start(self):
        if self.proc:
            return self.url
        # As the C harness: $SLUICE_SERVER_DIR holds a server build of its own.
        exe = shutil.which('redis-server', path=os.environ.get('SLUICE_SERVER_DIR') or None)
        if not exe:
            return None
        sock = os.path.join(self.tmp, 'redis.sock')
        self.proc = subprocess.Popen([exe, '--port', '0', '--unixsocket', sock, '--save', '',
                                      '--appendonly', 'no', '--dir', self.tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)  # the socket appears when the server listens
        self.url = 'unix://' + sock
        return self.url if os.path.exists(sock) else None

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()


def transcript(body):
    """Split a console block into (command, expected output) pairs."""
    steps = []
    for line in body.rstrip('\n').split('\n'):
        if line.startswith('$ '):
            steps.append([line[2:], []])
        elif steps:
            steps[-1][1].append(line)
    return steps


def run_console(body, sluice_bin, redis, tmp):
    url = redis.start()
    if not url:
        return False, 'redis-server could not be started'
    env = dict(os.environ, SLUICE_REDIS=url,
               PATH=os.path.dirname(sluice_bin) + os.pathsep + os.environ.get('PATH', ''))
    work = tempfile.mkdtemp(dir=tmp)
    steps = transcript(body)
    # One shell for the whole transcript, as a reader types it: $?, variables
    # and cd carry over. After each command a marker line splits the output;
    # (exit $rc) hands the command's status on to the next one.
    script = ''.join('%s\n__rc=$?; printf \'\\n%s\\n\'; (exit $__rc)\n' % (cmd, STEP)
                     for cmd, _ in steps)
    r = subprocess.run(['bash', '-c', script], cwd=work, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    parts = r.stdout.split('\n' + STEP + '\n')
    for k, (cmd, want) in enumerate(steps):
        out = parts[k].rstrip('\n') if k < len(parts) else '(no output: the shell ended)'
        got = out.split('\n') if out else []
        if got != want:
            return False, '$ %s\nwanted:\n%s\ngot:\n%s' % (cmd, '\n'.join(want), '\n'.join(got))
    return True, ''


def main():
    src, build, sluice_bin = (os.path.abspath(a) for a in sys.argv[1:4])
    sanitize = sys.argv[4] if len(sys.argv) > 4 else 'none'
    pages = [os.path.join(src, 'README.md'), os.path.join(src, 'bench', 'README.md')]
    pages += sorted(glob.glob(os.path.join(src, 'docs', '*.md')))
    tap = Tap()
    tmp = tempfile.mkdtemp(prefix='sluice-docs-')
    redis = Redis(tmp)
    try:
        for page in pages:
            name = os.path.relpath(page, src)
            for line, lang, marker, context, body in blocks(page):
                where = '%s:%d' % (name, line)
                if lang not in LANGS:
                    tap.result(False, '%s: a fenced block names its language' % where,
                               'got "```%s"; use one of %s' % (lang, ', '.join(sorted(LANGS))))
                elif lang == 'c':
                    whole = re.search(r'\bint main\(', body) is not None
                    ok, out = compile_c(src, build, body, context, whole, tmp, sanitize)
                    kind = 'program builds and links' if whole else 'fragment compiles'
                    tap.result(ok, '%s: C %s' % (where, kind), out)
                    if marker == 'c-file':
                        ok, out = same_as_file(src, context, body)
                        tap.result(ok, '%s: C block is %s' % (where, context), out)
                elif lang in ('sh', 'console'):
                    if marker == 'run' and lang == 'console':
                        ok, out = run_console(body, sluice_bin, redis, tmp)
                        tap.result(ok, '%s: transcript runs as shown' % where, out)
                    else:
                        tap.result(marker == 'illustrative',
                                   '%s: shell example is marked' % where,
                                   'put <!-- illustrative --> (or <!-- run --> before a '
                                   '```console transcript) right before the fence')
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print('1..%d' % tap.n)
    return 1 if tap.failed else 0


if __name__ == '__main__':
    sys.exit(main())
