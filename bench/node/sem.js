// Node peer of bench_sem: redis-semaphore's Semaphore (ioredis) doing the same
// jobs as sluice's semaphore against the same server, with its default options
// (lockTimeout 10 s, refresh every 8 s, acquire polls every retryInterval 10 ms).
//
//   node sem.js pairs HOST PORT LIMIT IN_FLIGHT:PAIRS...
//       For each level: IN_FLIGHT acquire -> release loops on one ioredis
//       connection, each with its own Semaphore instance on one key of LIMIT
//       permits, until PAIRS pairs are done; one JSON line per level
//       (cpu_us_per_op: this process's CPU per pair, process.cpuUsage):
//       {"in_flight":..., "pairs_per_s":..., "p50_ms":..., "p99_ms":...}
//       (latencies are of acquire).
//   node sem.js wake HOST PORT ITERATIONS
//       A holder (one connection) holds the only permit of a 1-permit
//       semaphore while a waiter (another connection) is blocked in acquire();
//       after a random 2..22 ms the holder releases. Wake-up latency is
//       release() called -> the waiter's acquire() resolved. One JSON line:
//       {"p50_ms":..., "p99_ms":..., "max_ms":...}
'use strict';
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');

function pct(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

async function pairs(redis, key, limit, inflight, total) {
  const lat = new Float64Array(total);
  let sent = 0;
  async function worker() {
    const sem = new Semaphore(redis, key, limit);
    while (sent < total) {
      const i = sent++;
      const t0 = nowMs();
      await sem.acquire();
      lat[i] = nowMs() - t0;
      await sem.release();
    }
  }
  const t0 = nowMs();
  const cpu0 = process.cpuUsage();
  await Promise.all(Array.from({ length: inflight }, worker));
  const cpu = process.cpuUsage(cpu0);
  const secs = (nowMs() - t0) / 1000;
  lat.sort();
  return { in_flight: inflight, pairs_per_s: total / secs, p50_ms: pct(lat, 50), p99_ms: pct(lat, 99),
           cpu_us_per_op: (cpu.user + cpu.system) / total };
}

async function wake(conn, key, iterations) {
  const a = new Redis(conn), b = new Redis(conn);
  const lat = [];
  for (let i = 0; i < iterations + 5; i++) {
    const holder = new Semaphore(a, key, 1);
    const waiter = new Semaphore(b, key, 1);
    await holder.acquire();
    let t0 = 0;
    const granted = waiter.acquire().then(() => nowMs() - t0);
    await sleep(2 + Math.random() * 20);
    t0 = nowMs();
    await holder.release();
    const ms = await granted;
    if (i >= 5) lat.push(ms); // the first few warm up connections and JIT
    await waiter.release();
  }
  a.disconnect();
  b.disconnect();
  lat.sort((x, y) => x - y);
  return { p50_ms: pct(lat, 50), p99_ms: pct(lat, 99), max_ms: lat[lat.length - 1] };
}

async function main() {
  const [mode, host, port, ...rest] = process.argv.slice(2);
  const conn = { host, port: Number(port) };
  const key = `rsem${process.pid}`;
  if (mode === 'pairs') {
    const [limit, ...levels] = rest;
    if (!levels.length) throw new Error('usage: sem.js pairs HOST PORT LIMIT IN_FLIGHT:PAIRS...');
    const redis = new Redis(conn);
    await pairs(redis, `${key}w`, Number(limit), 10, 1000); // warm up: connection, script load, JIT
    for (const lv of levels) {
      const [n, total] = lv.split(':').map(Number);
      console.log(JSON.stringify(await pairs(redis, `${key}_${n}`, Number(limit), n, total)));
    }
    redis.disconnect();
  } else if (mode === 'wake') {
    console.log(JSON.stringify(await wake(conn, `${key}wake`, Number(rest[0]))));
  } else {
    throw new Error('usage: sem.js pairs|wake HOST PORT ...');
  }
}

main().then(() => process.exit(0), (e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
