#!/usr/bin/env python3
"""The agent behind real proxies: `sluice agent` with two nginx instances.

    test_proxies.py SRC_DIR SLUICE_BIN

Starts a private redis-server (unix socket), the agent with the rule file of
docs/proxies.md and two nginx (Debian's package) with its nginx block, each
block as the page shows it with only its ports changed; then checks the
limits through both proxies, the failure policies, a bad file, a reload and
the agent's death. Prints TAP. Without nginx or redis-server it exits 77
(skip), except under CI=true, where that is a failure.
"""
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r'^<!--\s*proxies-test:\s*(\S+)\s*-->$')


def doc_blocks(path):
    """{name: body} of the fenced blocks marked <!-- proxies-test: NAME -->."""
    lines = open(path, encoding='utf-8').read().split('\n')
    found = {}
    for i, line in enumerate(lines):
        m = MARK.match(line.strip())
        if m and i + 1 < len(lines) and lines[i + 1].startswith('```'):
            j = i + 2
            while lines[j] != '```':
                j += 1
            found[m.group(1)] = '\n'.join(lines[i + 2:j]) + '\n'
    return found


def replace_once(text, old, new):
    """text with old replaced; the page must still hold old (kept in step)."""
    if old not in text:
        raise AssertionError('docs/proxies.md no longer has %r' % old)
    return text.replace(old, new)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_for(cond, timeout, what):
    """Poll cond (a check of another process's state) until true."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError('timed out waiting for ' + what)


def accepts(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=0.2).close()
        return True
    except OSError:
        return False


class Redis:
    def __init__(self, tmp):
        self.sock = os.path.join(tmp, 'redis.sock')
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ['redis-server', '--port', '0', '--unixsocket', self.sock, '--save', '',
             '--appendonly', 'no'], stdout=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(self.sock) and self.cli('PING') == 'PONG', 5,
                 'redis-server')

    def cli(self, *args):
        r = subprocess.run(['redis-cli', '-s', self.sock] + list(args), capture_output=True,
                           text=True)
        return r.stdout.strip()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        if os.path.exists(self.sock):
            os.unlink(self.sock)


class Agent:
    def __init__(self, tmp, binary, redis_url, rules_text):
        self.tmp, self.binary, self.url = tmp, binary, redis_url
        self.port = free_port()
        self.rules = os.path.join(tmp, 'rules.ini')
        self.log = os.path.join(tmp, 'agent.log')
        self.write(rules_text)
        self.proc = None

    def write(self, rules_text):
        text = replace_once(rules_text, '127.0.0.1:9181', '127.0.0.1:%d' % self.port)
        with open(self.rules, 'w') as f:
            f.write(text)

    def start(self):
        self.proc = subprocess.Popen([self.binary, 'agent', '--config', self.rules, '--redis',
                                      self.url], stderr=open(self.log, 'a'))
        wait_for(lambda: accepts(self.port), 5, 'the agent')

    def log_text(self):
        return open(self.log).read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        return self.proc.returncode if self.proc else None


class Nginx:
    def __init__(self, tmp, name, block, agent_port, backend_port):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o777)  # its workers run as nobody
        self.port = free_port()
        conf = replace_once(block, 'listen 8080;', 'listen 127.0.0.1:%d;' % self.port)
        conf = replace_once(conf, '127.0.0.1:9181', '127.0.0.1:%d' % agent_port)
        conf = replace_once(conf, '127.0.0.1:8000', '127.0.0.1:%d' % backend_port)
        temps = ''.join('%s_temp_path %s/%s;\n' % (t, self.dir, t)
                        for t in ('client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'))
        self.conf = os.path.join(self.dir, 'nginx.conf')
        with open(self.conf, 'w') as f:
            f.write('daemon off;\nworker_processes 1;\npid %s/nginx.pid;\n'
                    'error_log %s/error.log;\nevents { worker_connections 256; }\n'
                    'http {\naccess_log off;\n%s'
                    # the application behind the proxy
                    'server { listen 127.0.0.1:%d; location / { return 200 "ok\\n"; } }\n'
                    '%s}\n' % (self.dir, self.dir, temps, backend_port, conf))
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(['nginx', '-p', self.dir, '-c', self.conf, '-e',
                                      os.path.join(self.dir, 'error.log')])
        wait_for(lambda: accepts(self.port), 5, 'nginx')

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def request(port, method='GET', path='/', source='127.0.0.1', conn=None, headers=None):
    """(status, headers dict, seconds taken) of one request."""
    c = conn or http.client.HTTPConnection('127.0.0.1', port, timeout=10,
                                           source_address=(source, 0))
    t = time.monotonic()
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    r.read()
    took = time.monotonic() - t
    if not conn:
        c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, took


def rule_value(text, rule, name):
    """A rule's setting, read from the page's rule file."""
    section = text.split('[rule %s]' % rule, 1)[1].split('\n[', 1)[0]
    return int(re.search(r'^%s = (\d+)$' % name, section, re.M).group(1))


class Tap:
    def __init__(self):
        self.n = self.failed = 0

    def run(self, name, fn):
        self.n += 1
        try:
            fn()
            print('ok %d - %s' % (self.n, name), flush=True)
        except Exception as e:  # a failed check or a process that misbehaved
            self.failed += 1
            print('not ok %d - %s' % (self.n, name), flush=True)
            for line in ('%s: %s' % (type(e).__name__, e)).split('\n'):
                print('# ' + line, flush=True)


class Suite:
    def __init__(self, src, binary, tmp):
        self.blocks = doc_blocks(os.path.join(src, 'docs', 'proxies.md'))
        self.rules_text = self.blocks['rules']
        self.binary, self.tmp = binary, tmp
        self.redis = Redis(tmp)
        self.redis.start()
        self.agent = Agent(tmp, binary, 'unix://' + self.redis.sock, self.rules_text)
        self.agent.start()
        backend = free_port()
        self.nginx = [Nginx(tmp, 'nginx-%s' % n, self.blocks['nginx'], self.agent.port,
                            backend if n == 'a' else free_port()) for n in ('a', 'b')]
        for n in self.nginx:
            n.start()

    def close(self):
        for n in self.nginx:
            n.stop()
        self.agent.stop()
        self.redis.stop()

    def through_both(self, count, method, path, source):
        """count requests, alternating the two nginx: their statuses."""
        return [request(self.nginx[i % 2].port, method, path, source) for i in range(count)]

    def bad_file(self):
        bad = self.rules_text.replace('algo = gcra', 'algo = fast')
        line = bad.split('\n').index('algo = fast') + 1
        path = os.path.join(self.tmp, 'bad.ini')
        with open(path, 'w') as f:
            f.write(bad)
        r = subprocess.run([self.binary, 'agent', '--config', path], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 64, r.returncode
        want = '%s:%d: algo must be fixed, sliding-log, sliding-counter or gcra' % (path, line)
        assert want in r.stderr, r.stderr
        # A rule without its limit: the line of its section.
        with open(path, 'w') as f:
            f.write(self.rules_text.replace('limit = 100\n', ''))
        r = subprocess.run([self.binary, 'agent', '--config', path], capture_output=True,
                           text=True, timeout=10)
        line = self.rules_text.split('\n').index('[rule per-client]') + 1
        assert r.returncode == 64 and "%s:%d: rule 'per-client'" % (path, line) in r.stderr, \
            r.stderr

    def away_from_window_end(self, period_ms):
        """Start a fixed-window count well inside one window of Redis's clock."""
        sec, usec = self.redis.cli('TIME').split('\n')
        now_ms = int(sec) * 1000 + int(usec) // 1000
        left = period_ms - now_ms % period_ms
        if left < 10000:
            time.sleep(left / 1000 + 0.05)

    def fixed_exact(self):
        limit = rule_value(self.rules_text, 'per-client', 'limit')
        self.away_from_window_end(rule_value(self.rules_text, 'per-client', 'period_ms'))
        got = self.through_both(3 * limit, 'GET', '/', '127.0.0.2')
        allowed = [r for r in got if r[0] == 200]
        denied = [r for r in got if r[0] == 429]
        assert len(allowed) == limit and len(denied) == 2 * limit, \
            (len(allowed), len(denied), set(r[0] for r in got))
        assert allowed[0][1]['ratelimit-policy'] == '"per-client";q=%d;w=60' % limit, \
            allowed[0][1]
        assert int(denied[0][1]['retry-after']) >= 1, denied[0][1]
        assert denied[0][1]['ratelimit'].startswith('"per-client";r=0;t='), denied[0][1]

    def gcra_exact(self):
        burst = rule_value(self.rules_text, 'login', 'burst')
        got = self.through_both(4 * burst, 'POST', '/login', '127.0.0.3')
        allowed = sum(1 for r in got if r[0] == 200)
        denied = sum(1 for r in got if r[0] == 429)
        assert allowed == burst and denied == 3 * burst, (allowed, denied)
        # GET /login is not the login rule's: only per-client counts it.
        assert request(self.nginx[0].port, 'GET', '/login', '127.0.0.3')[0] == 200

    def reload(self):
        conn = http.client.HTTPConnection('127.0.0.1', self.agent.port, timeout=10)
        ask = {'X-Original-URI': '/admin/x', 'X-Real-IP': '10.9.9.9'}
        assert request(0, conn=conn, headers=ask)[0] == 200
        added = self.rules_text + ('\n[rule admin]\npath_prefix = /admin\nkey = addr\n'
                                   'algo = fixed\nlimit = 1\nperiod_ms = 3600000\n')
        self.agent.write(added)
        self.agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: 'reloaded' in self.agent.log_text(), 5, 'the reload')
        # The same connection, kept across the reload, now meets the new rule.
        codes = [request(0, conn=conn, headers=ask)[0] for _ in range(3)]
        assert codes == [200, 429, 429], codes
        self.agent.write(added + 'limit = many\n')
        self.agent.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: 'reload refused' in self.agent.log_text(), 5, 'the refusal')
        line = len(added.split('\n'))
        assert "rules.ini:%d: limit must be a number" % line in self.agent.log_text(), \
            self.agent.log_text()
        assert request(0, conn=conn, headers=ask)[0] == 429  # the old rules, still
        conn.close()
        assert request(self.nginx[1].port, 'GET', '/admin/', '127.0.0.9')[0] == 200
        assert request(self.nginx[0].port, 'GET', '/admin/', '127.0.0.9')[0] == 429

    def policies(self, how):
        """Redis paused or killed: per-client allows, login denies, in time."""
        timeout = rule_value(self.rules_text, 'per-client', 'timeout_ms') / 1000
        if how == 'paused':
            self.redis.proc.send_signal(signal.SIGSTOP)
        else:
            self.redis.stop()
        try:
            for i in range(3):
                status, headers, took = request(self.nginx[i % 2].port, 'GET', '/', '127.0.0.4')
                assert status == 200 and 'ratelimit' not in headers, (status, headers)
                assert took < timeout + 0.25, took
                status, headers, took = request(self.nginx[i % 2].port, 'POST', '/login',
                                                '127.0.0.5')
                assert status == 429 and headers['retry-after'] == '1', (status, headers)
                assert took < timeout + 0.25, took
        finally:
            if how == 'paused':
                self.redis.proc.send_signal(signal.SIGCONT)
            else:
                self.redis.start()
        # Redis back: decisions come from it again (RateLimit fields).
        wait_for(lambda: 'ratelimit' in request(self.nginx[0].port, 'GET', '/', '127.0.0.6')[1],
                 10, 'decisions from Redis')

    def agent_killed(self):
        self.agent.stop(signal.SIGKILL)
        self.agent.write(self.rules_text)  # (the last reload left a bad file)
        assert request(self.nginx[0].port, 'GET', '/', '127.0.0.7')[0] == 503
        assert request(self.nginx[1].port, 'GET', '/', '127.0.0.7')[0] == 503
        self.agent.start()
        assert request(self.nginx[0].port, 'GET', '/', '127.0.0.7')[0] == 200
        assert request(self.nginx[1].port, 'GET', '/', '127.0.0.7')[0] == 200
        self.agent.stop()
        assert self.agent.proc.returncode == 0, self.agent.proc.returncode


def main():
    src, binary = sys.argv[1], sys.argv[2]
    missing = [t for t in ('nginx', 'redis-server', 'redis-cli') if not shutil.which(t)]
    if not shutil.which('nginx') and os.path.exists('/usr/sbin/nginx'):
        os.environ['PATH'] += ':/usr/sbin'
        missing.remove('nginx')
    if missing:
        if os.environ.get('CI') == 'true':
            print('1..1\nnot ok 1 - proxies: missing %s' % ' '.join(missing))
            return 1
        print('1..0 # SKIP missing %s' % ' '.join(missing))
        return 77
    tap = Tap()
    print('1..7', flush=True)
    with tempfile.TemporaryDirectory(prefix='sluice-proxies-') as tmp:
        if os.environ.get('SLUICE_KEEP_TMP'):
            tmp = tempfile.mkdtemp(prefix='sluice-proxies-kept-')
        os.chmod(tmp, 0o755)
        suite = Suite(src, binary, tmp)
        try:
            tap.run('a bad rule file is refused with its line and why', suite.bad_file)
            tap.run('fixed window: two nginx share the limit exactly', suite.fixed_exact)
            tap.run('gcra: two nginx share the burst exactly', suite.gcra_exact)
            tap.run('SIGHUP reloads on kept connections; a bad reload keeps the rules',
                    suite.reload)
            tap.run('Redis paused: each rule\'s policy within its timeout',
                    lambda: suite.policies('paused'))
            tap.run('Redis killed: each rule\'s policy, then Redis again',
                    lambda: suite.policies('killed'))
            tap.run('agent killed: nginx answers 503, then recovers', suite.agent_killed)
        finally:
            suite.close()
    return 1 if tap.failed else 0


if __name__ == '__main__':
    sys.exit(main())
