#!/usr/bin/env python3
"""The agent behind real proxies: `sluice agent`, two nginx, two HAProxy.

    test_proxies.py SRC_DIR SLUICE_BIN

Starts a private redis-server (unix socket), the agent with the rule file of
docs/proxies.md, two nginx and two HAProxy (Debian's packages) with its
blocks, each block as the page shows it with only its ports and paths
changed; then checks the limits through both instances of each proxy, the
concurrency rules (one semaphore, and one per client with its cap), the
failure policies, malformed SPOP frames, a bad file, a reload and the
agent's death. Prints TAP. Without nginx, haproxy or redis-server it exits
77 (skip), except under CI=true, where that is a failure.
"""
import concurrent.futures
import http.client
import http.server
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

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
        self.port, self.spop_port = free_port(), free_port()
        self.rules = os.path.join(tmp, 'rules.ini')
        self.log = os.path.join(tmp, 'agent.log')
        self.write(rules_text)
        self.proc = None

    def write(self, rules_text):
        text = replace_once(rules_text, '127.0.0.1:9181', '127.0.0.1:%d' % self.port)
        text = replace_once(text, '127.0.0.1:9182', '127.0.0.1:%d' % self.spop_port)
        with open(self.rules, 'w') as f:
            f.write(text)

    def start(self):
        self.proc = subprocess.Popen([self.binary, 'agent', '--config', self.rules, '--redis',
                                      self.url], stderr=open(self.log, 'a'))
        wait_for(lambda: accepts(self.port) and accepts(self.spop_port), 5, 'the agent')

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


class Haproxy:
    def __init__(self, tmp, name, blocks, agent_port, backend_port):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.port = free_port()
        spoe = os.path.join(self.dir, 'sluice-spoe.conf')
        with open(spoe, 'w') as f:
            f.write(blocks['spoe'])
        conf = replace_once(blocks['haproxy'], 'bind :8080', 'bind 127.0.0.1:%d' % self.port)
        conf = replace_once(conf, '/etc/haproxy/sluice-spoe.conf', spoe)
        conf = replace_once(conf, '127.0.0.1:9182', '127.0.0.1:%d' % agent_port)
        conf = replace_once(conf, '127.0.0.1:8000', '127.0.0.1:%d' % backend_port)
        self.conf = os.path.join(self.dir, 'haproxy.cfg')
        with open(self.conf, 'w') as f:
            f.write('global\n    log stderr format raw local0 warning\n'
                    'defaults\n    mode http\n    log global\n    timeout connect 1s\n'
                    '    timeout client 10s\n    timeout server 10s\n\n' + conf)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(['haproxy', '-db', '-f', self.conf],
                                     stdout=open(os.path.join(self.dir, 'log'), 'w'),
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: accepts(self.port), 5, 'haproxy')

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class SlowApp:
    """HAProxy's application: /reports/ takes `delay` seconds, the rest none;
    it counts the /reports/ requests in flight at once. /exports/ waits until
    `gate` is set, counting its requests in flight per X-Client header."""

    def __init__(self):
        app = self
        self.delay, self.inflight, self.most, self.lock = 1.0, 0, 0, threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.by_client, self.most_by_client = {}, {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                slow = self.path.startswith('/reports/')
                if self.path.startswith('/exports/'):
                    app.export(self.headers.get('X-Client', ''))
                if slow:
                    with app.lock:
                        app.inflight += 1
                        app.most = max(app.most, app.inflight)
                    time.sleep(app.delay)
                    with app.lock:
                        app.inflight -= 1
                self.send_response(200)
                self.send_header('Content-Length', '3')
                self.end_headers()
                self.wfile.write(b'ok\n')

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def export(self, client):
        with self.lock:
            self.by_client[client] = self.by_client.get(client, 0) + 1
            self.most_by_client[client] = max(self.most_by_client.get(client, 0),
                                              self.by_client[client])
        self.gate.wait(10)
        with self.lock:
            self.by_client[client] -= 1

    def in_flight(self, client):
        with self.lock:
            return self.by_client.get(client, 0)

    def stop(self):
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


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


def spop_varint(v):
    if v < 240:
        return bytes([v])
    out = [(v | 240) & 0xff]
    v = (v - 240) >> 4
    while v >= 128:
        out.append((v | 128) & 0xff)
        v = (v - 128) >> 7
    return bytes(out + [v])


def spop_str(text):
    return spop_varint(len(text)) + text.encode()


def spop_kv_str(name, value):
    return spop_str(name) + b'\x08' + spop_str(value)


def spop_kv_u32(name, value):
    return spop_str(name) + b'\x03' + spop_varint(value)


def spop_frame(ftype, payload, sid=0, fid=0, flags=1):
    body = bytes([ftype]) + struct.pack('>I', flags) + spop_varint(sid) + spop_varint(fid) + payload
    return struct.pack('>I', len(body)) + body


def spop_read(s):
    """(type, the rest after the type) of the next frame s receives."""
    def exactly(n):
        got = b''
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                raise AssertionError('connection closed after %d bytes' % len(got))
            got += chunk
        return got
    body = exactly(struct.unpack('>I', exactly(4))[0])
    return body[0], body[1:]


def spop_value(data, at):
    """(value, next offset) of the typed data at data[at]."""
    def varint(at):
        v, shift = data[at], 4
        at += 1
        if v >= 240:
            while True:
                b = data[at]
                at += 1
                v += b << shift
                shift += 7
                if b < 128:
                    break
        return v, at
    kind = data[at] & 15
    if kind in (2, 3, 4, 5):  # integers
        v, at = varint(at + 1)
        return (v - (1 << 64) if kind in (2, 4) and v >= 1 << 63 else v), at
    if kind in (8, 9):  # string, binary
        n, at = varint(at + 1)
        return data[at:at + n].decode(), at + n
    raise AssertionError('type %d in an ACK' % kind)


class SpopPeer:
    """A HAProxy as the agent sees it, on one connection: NOTIFYs of
    sluice-check (with a `client` argument) and sluice-release, each
    answered by an ACK whose variables it returns."""

    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=5)
        self.s.sendall(spop_frame(1, spop_kv_str('supported-versions', '2.0') +
                                  spop_kv_u32('max-frame-size', 4096) +
                                  spop_kv_str('capabilities', '')))
        assert spop_read(self.s)[0] == 101
        self.sid = 0

    def notify(self, message, args):
        self.sid += 1
        payload = spop_str(message) + bytes([len(args)]) + \
            b''.join(spop_kv_str(k, v) for k, v in args)
        self.s.sendall(spop_frame(3, payload, sid=self.sid, fid=1))
        ftype, body = spop_read(self.s)
        assert ftype == 103 and body[4] == self.sid, (ftype, body)
        got, at = {}, 6  # after the flags and the two ids (a byte each)
        while at < len(body):
            assert body[at:at + 3] == b'\x01\x03\x02', body  # set-var, 3 args, txn
            n = body[at + 3]
            name = body[at + 4:at + 4 + n].decode()
            got[name], at = spop_value(body, at + 4 + n)
        return got

    def check(self, client):
        return self.notify('sluice-check', [('path', '/'), ('client', client)])

    def release(self, permit):
        assert self.notify('sluice-release', [('permit', permit)]) == {}

    def close(self):
        self.s.close()


def metric(port, name):
    """The value of one series of an agent's /metrics."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    c.request('GET', '/metrics')
    text = c.getresponse().read().decode()
    c.close()
    m = re.search('^' + re.escape(name) + r' (\d+)$', text, re.M)
    assert m, (name, text)
    return int(m.group(1))


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
            for frame in traceback.extract_tb(e.__traceback__)[1:]:  # where, for the log
                print('#   %s:%d in %s' % (os.path.basename(frame.filename), frame.lineno,
                                          frame.name), flush=True)


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
        self.app = SlowApp()
        self.haproxy = [Haproxy(tmp, 'haproxy-%s' % n, self.blocks, self.agent.spop_port,
                                self.app.port) for n in ('a', 'b')]
        for h in self.haproxy:
            h.start()
        self.proxies = {'nginx': self.nginx, 'haproxy': self.haproxy}

    def close(self):
        for n in self.nginx + self.haproxy:
            n.stop()
        self.app.stop()
        self.agent.stop()
        self.redis.stop()

    def second_agent(self, name, rules):
        """Another agent of rules and the suite's Redis, in a folder of its
        own, started; the case stops it."""
        tmp = os.path.join(self.tmp, name)
        os.makedirs(tmp)
        agent = Agent(tmp, self.binary, 'unix://' + self.redis.sock, rules)
        agent.start()
        return agent

    def through_both(self, count, method, path, source, proxy='nginx', parallel=1):
        """count requests, alternating the two instances of proxy, parallel at
        once (HAProxy then pipelines them on its agent connections)."""
        ports = [p.port for p in self.proxies[proxy]]
        with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
            return list(pool.map(lambda i: request(ports[i % 2], method, path, source),
                                 range(count)))

    def bad_file(self):
        bad = self.rules_text.replace('algo = gcra', 'algo = fast')
        line = bad.split('\n').index('algo = fast') + 1
        path = os.path.join(self.tmp, 'bad.ini')
        with open(path, 'w') as f:
            f.write(bad)
        r = subprocess.run([self.binary, 'agent', '--config', path], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 64, r.returncode
        want = "%s:%d: algo must be fixed, sliding-log, sliding-counter, gcra or concurrency, " \
            "got 'fast'" % (path, line)
        assert want in r.stderr, r.stderr
        # A rule without its limit: the line of its section.
        with open(path, 'w') as f:
            f.write(self.rules_text.replace('limit = 100\n', ''))
        r = subprocess.run([self.binary, 'agent', '--config', path], capture_output=True,
                           text=True, timeout=10)
        line = self.rules_text.split('\n').index('[rule per-client]') + 1
        assert r.returncode == 64 and "%s:%d: rule 'per-client'" % (path, line) in r.stderr, \
            r.stderr
        # Keyed concurrency (the page's exports rule): its key is checked as
        # a rate rule's is; a limit, or a bad max_keys, is refused. Each case:
        # the section, the text it changes there, the reason, the line's text.
        cases = [
            ('[rule exports]', 'key = addr\n', 'key = addr/129\n',
             "addr's prefix must be a number 0..128, got '129'", 'key = addr/129'),
            ('[rule exports]', 'permits = 2\n', 'permits = 2\nlimit = 5\n',
             "rule 'exports': algo = concurrency takes permits, lease_ms and key, not limit or "
             "period_ms", '[rule exports]'),
            ('[agent]', 'spop =', 'max_keys = 0\nspop =',
             "max_keys must be a number 1..100000, got '0'", 'max_keys = 0'),
        ]
        for section, old, new, reason, at in cases:
            split = self.rules_text.index(section)
            text = self.rules_text[:split] + replace_once(self.rules_text[split:], old, new)
            with open(path, 'w') as f:
                f.write(text)
            r = subprocess.run([self.binary, 'agent', '--config', path], capture_output=True,
                               text=True, timeout=10)
            line = text.split('\n').index(at) + 1
            assert r.returncode == 64 and "%s:%d: %s" % (path, line, reason) in r.stderr, \
                (reason, r.stderr)

    def away_from_window_end(self, period_ms):
        """Start a fixed-window count well inside one window of Redis's clock."""
        sec, usec = self.redis.cli('TIME').split('\n')
        now_ms = int(sec) * 1000 + int(usec) // 1000
        left = period_ms - now_ms % period_ms
        if left < 10000:
            time.sleep(left / 1000 + 0.05)

    def fixed_exact(self, proxy, source, parallel=1):
        limit = rule_value(self.rules_text, 'per-client', 'limit')
        self.away_from_window_end(rule_value(self.rules_text, 'per-client', 'period_ms'))
        got = self.through_both(3 * limit, 'GET', '/', source, proxy, parallel)
        allowed = [r for r in got if r[0] == 200]
        denied = [r for r in got if r[0] == 429]
        assert len(allowed) == limit and len(denied) == 2 * limit, \
            (len(allowed), len(denied), set(r[0] for r in got))
        assert int(denied[0][1]['retry-after']) >= 1, denied[0][1]
        if proxy == 'nginx':
            assert allowed[0][1]['ratelimit-policy'] == '"per-client";q=%d;w=60' % limit, \
                allowed[0][1]
            assert denied[0][1]['ratelimit'].startswith('"per-client";r=0;t='), denied[0][1]

    def gcra_exact(self, proxy, source, parallel=1):
        burst = rule_value(self.rules_text, 'login', 'burst')
        got = self.through_both(4 * burst, 'POST', '/login', source, proxy, parallel)
        allowed = sum(1 for r in got if r[0] == 200)
        denied = sum(1 for r in got if r[0] == 429)
        assert allowed == burst and denied == 3 * burst, (allowed, denied)
        # GET /login is not the login rule's: only per-client counts it.
        assert request(self.proxies[proxy][0].port, 'GET', '/login', source)[0] == 200

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
        """Redis paused or killed: per-client allows, login denies, in time,
        through both proxies."""
        timeout = rule_value(self.rules_text, 'per-client', 'timeout_ms') / 1000
        if how == 'paused':
            self.redis.proc.send_signal(signal.SIGSTOP)
        else:
            self.redis.stop()
        try:
            for i in range(4):
                port = (self.nginx + self.haproxy)[i].port
                status, headers, took = request(port, 'GET', '/', '127.0.0.4')
                assert status == 200 and 'ratelimit' not in headers, (i, status, headers)
                assert took < timeout + 0.25, took
                status, headers, took = request(port, 'POST', '/login', '127.0.0.5')
                assert status == 429 and headers['retry-after'] == '1', (i, status, headers)
                assert took < timeout + 0.25, took
        finally:
            if how == 'paused':
                self.redis.proc.send_signal(signal.SIGCONT)
            else:
                self.redis.start()
        # Redis back: decisions come from it again (RateLimit fields).
        wait_for(lambda: 'ratelimit' in request(self.nginx[0].port, 'GET', '/', '127.0.0.6')[1],
                 10, 'decisions from Redis')

    def local_policy_and_cap(self):
        """A second agent of its own rule file: on_redis_down = local decides
        by an in-process limiter while Redis is paused (exactly its limit
        passes), and max_connections closes one connection too many."""
        rules = ('[agent]\nhttp = 127.0.0.1:9181\nspop = 127.0.0.1:9182\n'
                 'max_connections = 3\n\n[rule local]\nkey = addr\nalgo = fixed\n'
                 'limit = 4\nperiod_ms = 3600000\non_redis_down = local\ntimeout_ms = 100\n')
        agent = self.second_agent('agent2', rules)
        try:
            ask = {'X-Original-URI': '/', 'X-Real-IP': '10.3.3.3'}

            def decided():
                # A reset: over max_connections while the agent had not yet
                # seen the previous request's connection close; not counted.
                for _ in range(50):
                    try:
                        return request(agent.port, path='/auth', headers=ask)[0]
                    except (ConnectionResetError, http.client.RemoteDisconnected):
                        time.sleep(0.02)
                raise AssertionError('the agent kept refusing connections')
            self.redis.proc.send_signal(signal.SIGSTOP)
            try:
                codes = [decided() for _ in range(8)]
            finally:
                self.redis.proc.send_signal(signal.SIGCONT)
            assert codes == [200] * 4 + [429] * 4, codes
            held = [socket.create_connection(('127.0.0.1', agent.port)) for _ in range(3)]
            try:
                time.sleep(0.1)  # the agent has accepted them
                with socket.create_connection(('127.0.0.1', agent.port), timeout=5) as extra:
                    try:
                        extra.sendall(b'GET /metrics HTTP/1.1\r\n\r\n')
                        got = extra.recv(100)
                    except (ConnectionResetError, BrokenPipeError):
                        got = b''  # closed before our request was read: a reset
                    assert got == b'', 'a fourth connection was served'
            finally:
                for h in held:
                    h.close()
            def served():
                try:  # until the agent has seen the others close, it resets
                    return request(agent.port, path='/metrics')[0] == 200
                except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                    return False
            wait_for(served, 5, 'a connection once the others closed')
        finally:
            agent.stop()

    def http_bounds(self):
        """Requests a broken or hostile client sends get their error and a
        close; pipelined requests are answered in order on one connection."""
        def exchange(data):
            with socket.create_connection(('127.0.0.1', self.agent.port), timeout=5) as s:
                s.sendall(data)
                got = b''
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        return got.decode('latin-1')
                    got += chunk
        big = b'GET / HTTP/1.1\r\nX-Pad: ' + b'a' * 9000 + b'\r\n\r\n'
        cases = [
            (b'GET / HTTP/1.1\r\nBad Field: x\r\n\r\n', '400'),
            (b'GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n', '400'),
            (b'GET / HTTP/2.0\r\n\r\n', '400'),
            (b'GET / HTTP/1.1\nHost: a\n\n', None),  # bare LFs: no head ever ends
            (big, '431'),
            (b'POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello', '413'),
            (b'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', '413'),
        ]
        for data, status in cases:
            if status is None:
                with socket.create_connection(('127.0.0.1', self.agent.port), timeout=5) as s:
                    s.sendall(data)
                    s.settimeout(0.3)
                    try:
                        assert s.recv(100) == b''
                    except socket.timeout:
                        pass  # waiting for the rest, as it should
                continue
            got = exchange(data)
            assert got.startswith('HTTP/1.1 %s ' % status) and 'Connection: close' in got, \
                (data[:40], got[:200])
        # Three pipelined requests, the last HTTP/1.0 (closes): three answers
        # in order, the limit counted down.
        ask = b'GET /auth HTTP/1.%d\r\nX-Original-URI: /admin/p\r\nX-Real-IP: 10.5.5.5\r\n\r\n'
        got = exchange(ask % 1 + ask % 1 + ask % 0)
        assert re.findall(r'^HTTP/1.1 (\d+)', got, re.M) == ['200', '200', '200'], got
        remaining = re.findall(r'^RateLimit: "per-client";r=(\d+)', got, re.M)
        assert [int(r) for r in remaining] == sorted((int(r) for r in remaining), reverse=True) \
            and len(set(remaining)) == 3, got

    def clients_leave(self):
        """Clients that hang up while Redis is paused and their decision is
        pending (HTTP and SPOP): the agent drops their answers and serves on."""
        hello = (spop_kv_str('supported-versions', '2.0') + spop_kv_u32('max-frame-size', 1024) +
                 spop_kv_str('capabilities', 'pipelining'))
        notify = spop_str('sluice-check') + bytes([2]) + spop_kv_str('path', '/x') + \
            spop_str('src') + bytes([6, 127, 0, 0, 77])
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(20):
                with socket.create_connection(('127.0.0.1', self.agent.port)) as s:
                    s.sendall(b'GET /auth HTTP/1.1\r\nHost: a\r\nX-Original-URI: /\r\n'
                              b'X-Real-IP: 10.7.7.%d\r\n\r\n' % i)
                with socket.create_connection(('127.0.0.1', self.agent.spop_port)) as s:
                    s.sendall(spop_frame(1, hello))
                    assert spop_read(s)[0] == 101
                    s.sendall(b''.join(spop_frame(3, notify, sid=i + 1, fid=1) for _ in range(3)))
            time.sleep(0.3)  # past the rules' deadlines: the answers are due now
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        assert self.agent.proc.poll() is None, 'the agent exited'
        status, _, _ = request(self.agent.port, path='/auth',
                               headers={'X-Original-URI': '/', 'X-Real-IP': '10.7.8.1'})
        assert status == 200, status

    def concurrency(self):
        """12 requests at once to /reports/ over both HAProxy: exactly the
        permits pass and no more reach the application at once; the permits
        come back with the responses, and after clients that hung up."""
        permits = rule_value(self.rules_text, 'reports', 'permits')
        self.app.most = 0
        got = self.through_both(4 * permits, 'GET', '/reports/a', '127.0.0.20', 'haproxy',
                                4 * permits)
        codes = sorted(r[0] for r in got)
        assert codes == [200] * permits + [429] * (3 * permits), codes
        assert self.app.most == permits, self.app.most
        got = self.through_both(permits, 'GET', '/reports/b', '127.0.0.21', 'haproxy', permits)
        assert [r[0] for r in got] == [200] * permits, [r[0] for r in got]
        # Clients that hang up mid-request: their permits are held while the
        # application works, and come back (with the response or the lease).
        socks = []
        for i in range(permits):
            s = socket.create_connection(('127.0.0.1', self.haproxy[i % 2].port),
                                         source_address=('127.0.0.22', 0))
            s.sendall(b'GET /reports/c HTTP/1.1\r\nHost: x\r\n\r\n')
            socks.append(s)
        wait_for(lambda: self.app.inflight == permits, 5, 'the requests at the application')
        for s in socks:
            s.close()
        assert request(self.haproxy[0].port, 'GET', '/reports/d', '127.0.0.23')[0] == 429
        start = time.monotonic()
        lease = rule_value(self.rules_text, 'reports', 'lease_ms') / 1000
        wait_for(lambda: request(self.haproxy[1].port, 'GET', '/reports/e', '127.0.0.24')[0]
                 == 200, lease + 3, 'a permit back')
        print('# permits back %.2f s after the clients hung up' % (time.monotonic() - start))

    def keyed_concurrency(self):
        """A rule keyed by address (exports): each client has its permits
        over both HAProxy, and another client's requests pass while the
        first one holds all of its own; the permits come back."""
        permits = rule_value(self.rules_text, 'exports', 'permits')
        ports = [h.port for h in self.haproxy]
        a, b = '127.0.0.30', '127.0.0.31'

        def send(source, i):
            return request(ports[i % 2], 'GET', '/exports/x', source,
                           headers={'X-Client': source})[0]
        pool = concurrent.futures.ThreadPoolExecutor(6 * permits)
        self.app.gate.clear()
        try:
            first = [pool.submit(send, a, i) for i in range(4 * permits)]
            wait_for(lambda: self.app.in_flight(a) == permits and
                     sum(f.done() for f in first) == 3 * permits, 10,
                     "a's permits held and the rest refused")
            assert all(f.result() == 429 for f in first if f.done())
            # b is not held back by a's load: all of its permits, then 429.
            second = [pool.submit(send, b, i) for i in range(permits)]
            wait_for(lambda: self.app.in_flight(b) == permits, 10, "b's permits held")
            assert send(b, 0) == 429 and send(a, 1) == 429
        finally:
            self.app.gate.set()
        codes = sorted(f.result() for f in first + second)
        assert codes == [200] * (2 * permits) + [429] * (3 * permits), codes
        assert self.app.most_by_client == {a: permits, b: permits}, self.app.most_by_client
        # Back with the responses: both clients get all of them again.
        again = list(pool.map(lambda i: send(a if i % 2 else b, i), range(2 * permits)))
        pool.shutdown()
        assert again == [200] * (2 * permits), again
        assert metric(self.agent.port, 'sluice_agent_key_semaphores') == 2

    def keyed_cap(self):
        """A second agent with max_keys = 2: a third key is refused by the
        rule's policy while both handles are in use, takes the place of an
        idle one, and idle handles are freed; a reload keeps held permits."""
        rules = ('[agent]\nhttp = 127.0.0.1:9181\nspop = 127.0.0.1:9182\nmax_keys = 2\n'
                 'key_idle_s = 1\n\n[rule per-key]\nkey = header:client\nalgo = concurrency\n'
                 'permits = 1\non_redis_down = deny\ntimeout_ms = 150\n')
        agent = self.second_agent('agent3', rules)
        peer = SpopPeer(agent.spop_port)
        try:
            got = peer.check('a')
            assert got['allowed'] == 1 and len(got['permit']) == 32, got
            pa = got['permit']
            assert peer.check('a')['allowed'] == 0  # a's one permit is held
            pb = peer.check('b')['permit']
            got = peer.check('c')  # two handles, both in use: the policy (deny)
            assert got['allowed'] == 0 and got['retry_after_ms'] == 1000, got
            assert metric(agent.port, 'sluice_agent_key_refused_total') == 1
            peer.release(pa)  # a's handle is idle now: c takes its place
            got = peer.check('c')
            assert got['allowed'] == 1, got
            pc = got['permit']
            assert metric(agent.port,
                          'sluice_agent_key_semaphores_freed_total{reason="evicted"}') == 1
            assert metric(agent.port, 'sluice_agent_key_semaphores') == 2
            # A reload to 2 permits: the held permits keep their handles.
            agent.write(rules.replace('permits = 1', 'permits = 2'))
            agent.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: 'reloaded' in agent.log_text(), 5, 'the reload')
            peer.release(pb)
            peer.release(pc)
            assert metric(agent.port, 'sluice_agent_permits_held') == 0
            two = [peer.check('d') for _ in range(3)]
            assert [g['allowed'] for g in two] == [1, 1, 0], two
            for g in two[:2]:
                peer.release(g['permit'])
            wait_for(lambda: metric(agent.port, 'sluice_agent_key_semaphores') == 0, 5,
                     'the idle handles freed')
            assert metric(agent.port, 'sluice_agent_key_semaphores_freed_total{reason="idle"}') \
                >= 1
            c = http.client.HTTPConnection('127.0.0.1', agent.port, timeout=10)
            c.request('GET', '/metrics')
            text = c.getresponse().read().decode()
            c.close()
            assert 'name="[per-key]' not in text, text  # no series per key
            assert metric(agent.port, 'sluice_agent_key_connection_up') == 1
            if shutil.which('promtool'):
                r = subprocess.run(['promtool', 'check', 'metrics'], input=text, text=True,
                                   capture_output=True)
                assert r.returncode == 0, r.stdout + r.stderr
            # Stopped with a permit held: released, and its handle freed
            # (ASan's leak check, in a sanitized build, sees the exit).
            assert peer.check('e')['allowed'] == 1
        finally:
            peer.close()
            status = agent.stop()
        assert status == 0, agent.log_text()

    def metrics(self):
        """/metrics: the decisions so far, per rule and outcome, and the
        answers per front; promtool accepts the text."""
        c = http.client.HTTPConnection('127.0.0.1', self.agent.port, timeout=10)
        c.request('GET', '/metrics')
        text = c.getresponse().read().decode()
        c.close()
        def value(line):
            m = re.search('^' + re.escape(line) + r' (\d+)$', text, re.M)
            assert m, (line, text)
            return int(m.group(1))
        limit = rule_value(self.rules_text, 'per-client', 'limit')
        burst = rule_value(self.rules_text, 'login', 'burst')
        # Two fixed-window runs of 3 * limit (nginx, HAProxy), and more.
        d = 'sluice_agent_decisions_total{rule="%s",outcome="%s"}'
        assert value(d % ('per-client', 'allowed')) >= 2 * limit
        assert value(d % ('per-client', 'denied')) >= 4 * limit
        assert value(d % ('login', 'allowed')) == 2 * burst
        assert value(d % ('login', 'denied')) == 6 * burst
        # Redis paused, then killed: four requests each, through 4 proxies.
        assert value(d % ('per-client', 'policy_allowed')) >= 8
        assert value(d % ('login', 'policy_denied')) == 8
        assert value('sluice_agent_answers_total{front="spop",allowed="0"}') >= 2 * limit
        assert value('sluice_agent_protocol_errors_total{front="spop"}') == 5
        assert value('sluice_agent_reloads_total{result="refused"}') == 1
        assert value('sluice_agent_decision_seconds_count') > 0
        if shutil.which('promtool'):
            r = subprocess.run(['promtool', 'check', 'metrics'], input=text, text=True,
                               capture_output=True)
            assert r.returncode == 0, r.stdout + r.stderr

    def agent_killed(self):
        """nginx fails closed at once; HAProxy after its processing timeout
        (set-on-error); both decide again once the agent is back."""
        self.agent.stop(signal.SIGKILL)
        self.agent.write(self.rules_text)  # (the last reload left a bad file)
        for p in self.nginx + self.haproxy:
            status, _, took = request(p.port, 'GET', '/', '127.0.0.7')
            assert status == 503 and took < 1.5, (p.port, status, took)
        self.agent.start()
        # HAProxy reconnects to the agent on its own schedule: the first
        # requests may still meet the error.
        for p in self.nginx + self.haproxy:
            wait_for(lambda: request(p.port, 'GET', '/', '127.0.0.8')[0] == 200, 10,
                     'decisions again on port %d' % p.port)
        self.agent.stop()
        assert self.agent.proc.returncode == 0, self.agent.proc.returncode

    def spop_malformed(self):
        """Frames a broken peer sends: a DISCONNECT with their status, a
        close, and the agent serving the next connection."""
        hello = (spop_kv_str('supported-versions', '2.0') + spop_kv_u32('max-frame-size', 1024) +
                 spop_kv_str('capabilities', 'pipelining'))
        cases = [
            ('too big', spop_frame(1, hello), struct.pack('>I', 100000) + b'x' * 16, 3),
            # A string of 9 bytes with 2 left in the frame.
            ('truncated NOTIFY', spop_frame(1, hello),
             spop_frame(3, spop_str('m') + bytes([1]) + spop_str('path') + b'\x08\x09ab', sid=5), 4),
            ('fragment', spop_frame(1, hello), spop_frame(3, b'', sid=5, flags=0), 10),
            ('no HELLO first', b'', spop_frame(3, b'', sid=5), 4),
            ('old version', b'', spop_frame(1, spop_kv_str('supported-versions', '1.0') +
                                            spop_kv_u32('max-frame-size', 1024) +
                                            spop_kv_str('capabilities', '')), 8),
        ]
        for name, first, bad, status in cases:
            with socket.create_connection(('127.0.0.1', self.agent.spop_port), timeout=5) as s:
                if first:
                    s.sendall(first)
                    ftype, _ = spop_read(s)
                    assert ftype == 101, (name, ftype)  # AGENT-HELLO
                s.sendall(bad)
                ftype, payload = spop_read(s)
                assert ftype == 102, (name, ftype)  # AGENT-DISCONNECT
                # After the flags (4 bytes) and the ids (0 and 0, a byte each).
                assert payload[6:].startswith(spop_kv_u32('status-code', status)), \
                    (name, payload)
                assert s.recv(1) == b'', name  # closed
        # Pipelining on one connection: three NOTIFYs, three ACKs by id.
        with socket.create_connection(('127.0.0.1', self.agent.spop_port), timeout=5) as s:
            s.sendall(spop_frame(1, hello))
            assert spop_read(s)[0] == 101
            msg = spop_str('sluice-check') + bytes([2]) + spop_kv_str('path', '/x') + \
                spop_str('src') + bytes([6, 127, 0, 0, 99])
            s.sendall(b''.join(spop_frame(3, msg, sid=10 + i, fid=1) for i in range(3)))
            ids = set()
            for _ in range(3):
                ftype, payload = spop_read(s)
                assert ftype == 103, ftype
                ids.add(payload[4])  # the stream id, after the flags
            assert ids == {10, 11, 12}, ids


def main():
    src, binary = sys.argv[1], sys.argv[2]
    os.environ['PATH'] += ':/usr/sbin'  # where Debian puts nginx and haproxy
    missing = [t for t in ('nginx', 'haproxy', 'redis-server', 'redis-cli')
               if not shutil.which(t)]
    if missing:
        if os.environ.get('CI') == 'true':
            print('1..1\nnot ok 1 - proxies: missing %s' % ' '.join(missing))
            return 1
        print('1..0 # SKIP missing %s' % ' '.join(missing))
        return 77
    tap = Tap()
    print('1..17', flush=True)
    with tempfile.TemporaryDirectory(prefix='sluice-proxies-') as tmp:
        if os.environ.get('SLUICE_KEEP_TMP'):
            tmp = tempfile.mkdtemp(prefix='sluice-proxies-kept-')
        os.chmod(tmp, 0o755)
        suite = Suite(src, binary, tmp)
        try:
            tap.run('a bad rule file is refused with its line and why', suite.bad_file)
            tap.run('fixed window: two nginx share the limit exactly',
                    lambda: suite.fixed_exact('nginx', '127.0.0.2'))
            tap.run('gcra: two nginx share the burst exactly',
                    lambda: suite.gcra_exact('nginx', '127.0.0.3'))
            tap.run('fixed window: two HAProxy, 8 clients at once, share the limit exactly',
                    lambda: suite.fixed_exact('haproxy', '127.0.0.12', 8))
            tap.run('gcra: two HAProxy, 8 clients at once, share the burst exactly',
                    lambda: suite.gcra_exact('haproxy', '127.0.0.13', 8))
            tap.run('SPOP: bad frames get a DISCONNECT and a close; pipelined ACKs',
                    suite.spop_malformed)
            tap.run('concurrency: two HAProxy never pass the permits; they come back',
                    suite.concurrency)
            tap.run('keyed concurrency: per client over two HAProxy, one not held by another',
                    suite.keyed_concurrency)
            tap.run('keyed concurrency: max_keys refuses by policy, evicts idle, frees them',
                    suite.keyed_cap)
            tap.run('clients gone before their answer: the agent serves on',
                    suite.clients_leave)
            tap.run('HTTP: malformed, too large or with a body: refused and closed; pipelining',
                    suite.http_bounds)
            tap.run('on_redis_down = local: the limit per agent; max_connections',
                    suite.local_policy_and_cap)
            tap.run('SIGHUP reloads on kept connections; a bad reload keeps the rules',
                    suite.reload)
            tap.run('Redis paused: each rule\'s policy within its timeout',
                    lambda: suite.policies('paused'))
            tap.run('Redis killed: each rule\'s policy, then Redis again',
                    lambda: suite.policies('killed'))
            tap.run('/metrics counts decisions per rule, answers, errors; promtool agrees',
                    suite.metrics)
            tap.run('agent killed: nginx and HAProxy answer 503, then recover',
                    suite.agent_killed)
        finally:
            suite.close()
    return 1 if tap.failed else 0


if __name__ == '__main__':
    sys.exit(main())
