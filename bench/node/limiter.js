// Node peer of bench_limiter: rate-limiter-flexible's RateLimiterRedis (a
// fixed window: one Lua script per consume) over one ioredis connection,
// doing the same job as sluice's fixed-window limiter against the same server.
//
//   node limiter.js HOST PORT IN_FLIGHT REQUESTS KEYSPACE LIMIT PERIOD_MS
//
// Keeps IN_FLIGHT consumes outstanding until REQUESTS are done, each for a
// random key of KEYSPACE (1: every consume on one hot key), and prints one
// JSON line (cpu_us_per_op: this process's user + system CPU over the
// measured run, process.cpuUsage, like the C side's getrusage):
//   {"rps":..., "p50_ms":..., "p99_ms":..., "cpu_us_per_op":..., "allowed":..., "denied":...}
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

function pct(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function run(rl, inflight, total, keyspace) {
  const lat = new Float64Array(total);
  let sent = 0, allowed = 0, denied = 0;
  async function worker() {
    while (sent < total) {
      const i = sent++;
      const key = String(Math.floor(Math.random() * keyspace)).padStart(12, '0');
      const t0 = process.hrtime.bigint();
      try {
        await rl.consume(key);
        allowed++;
      } catch (e) {
        if (e instanceof Error) throw e; // a Redis error, not a denial
        denied++;
      }
      lat[i] = Number(process.hrtime.bigint() - t0) / 1e6;
    }
  }
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: inflight }, worker));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  lat.sort();
  return { rps: total / secs, p50_ms: pct(lat, 50), p99_ms: pct(lat, 99),
           cpu_us_per_op: (cpu.user + cpu.system) / total, allowed, denied };
}

async function main() {
  const [host, port, inflight, total, keyspace, limit, periodMs] = process.argv.slice(2);
  if (!periodMs) throw new Error('usage: limiter.js HOST PORT IN_FLIGHT REQUESTS KEYSPACE LIMIT PERIOD_MS');
  const redis = new Redis({ host, port: Number(port), lazyConnect: true });
  await redis.connect();
  const rl = new RateLimiterRedis({
    storeClient: redis,
    keyPrefix: `rlflex${process.pid}`,
    points: Number(limit),
    duration: Math.max(1, Math.ceil(Number(periodMs) / 1000)),
  });
  await run(rl, 10, 500, Number(keyspace)); // warm up: connection, script load, JIT
  const res = await run(rl, Number(inflight), Number(total), Number(keyspace));
  console.log(JSON.stringify(res));
  redis.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
