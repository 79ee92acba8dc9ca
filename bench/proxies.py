#!/usr/bin/env python3
"""nginx and HAProxy under wrk: limited by sluice agent, by their own
per-instance limiter, and not limited, in the same run.

    bench/proxies.py SLUICE_BIN [--duration S] [--conns "10 100"]

Starts a private redis-server (unix socket), the agent, and per mode one
proxy in front of the application (a fixed 200 from nginx: for the nginx
modes a server of the same nginx, as in the test; for HAProxy a separate
nginx):

  nginx-none        nginx proxying, no limit
  nginx-limit_req   nginx's own limit_req (per instance), never reached
  nginx-sluice      nginx with docs/proxies.md's auth_request block
  haproxy-none      HAProxy proxying, no limit
  haproxy-stick     HAProxy's stick table (http_req_rate), never reached
  haproxy-sluice    HAProxy with docs/proxies.md's SPOE blocks

The sluice rule is a GCRA of 1,000,000,000 a second keyed by address: every
request asks Redis and passes. For each mode and connection count,
"wrk -t1 -cN -dS --latency" runs on loopback; a row gives req/s, p50 and
p99 from wrk, the non-2xx count, and the CPU (utime + stime, /proc) per
request of the agent and of redis-server.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'cli'))
import test_proxies as tp  # noqa: E402 (the proxies' and servers' starters)

RULES = '''[agent]
http = 127.0.0.1:9181
spop = 127.0.0.1:9182

[rule bench]
key = addr
algo = gcra
limit = 1000000000
period_ms = 1000
on_redis_down = allow
timeout_ms = 150
'''

NGINX_PLAIN = '''server {
    listen 8080;
    %s
    location / {
        %s
        proxy_pass http://127.0.0.1:8000;
    }
}
'''

HAPROXY_PLAIN = '''frontend public
    bind :8080
    %s
    default_backend app

backend app
    server app1 127.0.0.1:8000
'''


def cpu_ticks(pid):
    fields = open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def wrk(port, conns, duration):
    out = subprocess.run(['wrk', '-t1', '-c%d' % conns, '-d%ds' % duration, '--latency',
                          'http://127.0.0.1:%d/' % port], capture_output=True, text=True).stdout
    def latency(pct):
        m = re.search(r'^\s*%s%%\s+([\d.]+)(us|ms|s)' % pct, out, re.M)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == 'us' else v * 1000 if m.group(2) == 's' else v
    m = re.search(r'(\d+) requests in', out)
    bad = re.search(r'Non-2xx or 3xx responses: (\d+)', out)
    return {'requests': int(m.group(1)), 'rps': float(re.search(r'Requests/sec:\s+([\d.]+)', out)
                                                       .group(1)),
            'p50': latency(50), 'p99': latency(99), 'non2xx': int(bad.group(1)) if bad else 0}


def proxy_for(mode, tmp, blocks, agent, backend):
    """An nginx serves the application itself (a server of its own, as in
    the test); HAProxy forwards to the separate app nginx on backend."""
    if mode == 'nginx-sluice':
        return tp.Nginx(tmp, mode, blocks['nginx'], agent.port, tp.free_port())
    if mode == 'haproxy-sluice':
        return tp.Haproxy(tmp, mode, blocks, agent.spop_port, backend)
    if mode.startswith('nginx'):
        zone, use = ('', '') if mode == 'nginx-none' else (
            'limit_req_zone $binary_remote_addr zone=bench:1m rate=1000000r/s;',
            'limit_req zone=bench burst=1000 nodelay;')
        block = (zone + '\n' + NGINX_PLAIN % ('', use)).replace('127.0.0.1:9181', '')
        return tp.Nginx(tmp, mode, block + '\n# 127.0.0.1:9181\n', agent.port, tp.free_port())
    rule = '' if mode == 'haproxy-none' else (
        'stick-table type ip size 100k expire 10s store http_req_rate(1s)\n'
        '    http-request track-sc0 src\n'
        '    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }')
    plain = dict(blocks, haproxy=HAPROXY_PLAIN % rule + '# 127.0.0.1:9182 '
                 '/etc/haproxy/sluice-spoe.conf\n')
    return tp.Haproxy(tmp, mode, plain, agent.spop_port, backend)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('sluice')
    ap.add_argument('--duration', type=int, default=10)
    ap.add_argument('--conns', default='10 100')
    ap.add_argument('--modes', default='nginx-none nginx-limit_req nginx-sluice haproxy-none '
                                       'haproxy-stick haproxy-sluice')
    args = ap.parse_args()
    os.environ['PATH'] += ':/usr/sbin'
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    blocks = tp.doc_blocks(os.path.join(src, 'docs', 'proxies.md'))
    print('| mode | conns | req/s | p50 ms | p99 ms | non-2xx | agent CPU us/req | '
          'Redis CPU us/req |\n|---|---|---|---|---|---|---|---|', flush=True)
    with tempfile.TemporaryDirectory(prefix='sluice-bench-proxies-') as tmp:
        os.chmod(tmp, 0o755)
        redis = tp.Redis(tmp)
        redis.start()
        agent = tp.Agent(tmp, args.sluice, 'unix://' + redis.sock, RULES)
        agent.start()
        backend_port = tp.free_port()
        app = tp.Nginx(tmp, 'app', 'server { listen 8080; }  # 127.0.0.1:9181 127.0.0.1:8000\n',
                       agent.port, backend_port)
        # The app: the wrapper's own backend server on backend_port.
        app.start()
        hz = os.sysconf('SC_CLK_TCK')
        try:
            for mode in args.modes.split():
                proxy = proxy_for(mode, tmp, blocks, agent, backend_port)
                proxy.start()
                try:
                    for conns in [int(c) for c in args.conns.split()]:
                        a0, r0 = cpu_ticks(agent.proc.pid), cpu_ticks(redis.proc.pid)
                        w = wrk(proxy.port, conns, args.duration)
                        a1, r1 = cpu_ticks(agent.proc.pid), cpu_ticks(redis.proc.pid)
                        per = 1e6 / hz / max(w['requests'], 1)
                        print('| %s | %d | %.0f | %.2f | %.2f | %d | %.1f | %.1f |' % (
                            mode, conns, w['rps'], w['p50'], w['p99'], w['non2xx'],
                            (a1 - a0) * per, (r1 - r0) * per), flush=True)
                finally:
                    proxy.stop()
        finally:
            app.stop()
            agent.stop()
            redis.stop()


if __name__ == '__main__':
    main()
