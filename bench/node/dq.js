// Node peer of bench_dq: BullMQ delayed jobs doing the same job as sluice's
// delay queue against the same server.
//
//   node dq.js push     HOST PORT N             addBulk N delayed jobs (chunks of 1000)
//   node dq.js consume  HOST PORT N             N jobs already due, worker drains them
//   node dq.js lateness HOST PORT RATE SECONDS  produce at RATE/s, delays 20..1020 ms
//   node dq.js idle     HOST PORT SECONDS       Redis commands/s of an idle worker
//
// Prints one JSON line. Lateness is the worker's Date.now() minus the job's
// due time (timestamp + delay), in ms (BullMQ keeps ms timestamps).
'use strict';
const Redis = require('ioredis');
const { Queue, Worker } = require('bullmq');

function pct(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const opts = (delay) => ({ delay, removeOnComplete: true, removeOnFail: true });

async function addMany(q, n, delayFn) {
  for (let done = 0; done < n; ) {
    const k = Math.min(1000, n - done);
    const jobs = [];
    for (let i = 0; i < k; i++) jobs.push({ name: 'j', data: { i: done + i }, opts: opts(delayFn()) });
    await q.addBulk(jobs);
    done += k;
  }
}

async function push(conn, name, n) {
  const q = new Queue(name, { connection: conn });
  await addMany(q, 1000, () => 600000); // warm up
  const t0 = process.hrtime.bigint();
  const cpu0 = process.cpuUsage();
  await addMany(q, n, () => 600000);
  const cpu = process.cpuUsage(cpu0);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await q.obliterate({ force: true });
  await q.close();
  return { push_per_s: n / secs, cpu_us_per_op: (cpu.user + cpu.system) / n };
}

async function consume(conn, name, n) {
  const q = new Queue(name, { connection: conn });
  await addMany(q, n, () => 1);
  await sleep(50);
  let done = 0, t0, finish;
  const all = new Promise((r) => (finish = r));
  const w = new Worker(name, async () => {}, { connection: conn, concurrency: 100, autorun: false });
  w.on('completed', () => { if (++done === n) finish(); });
  t0 = process.hrtime.bigint();
  const cpu0 = process.cpuUsage();
  w.run();
  await all;
  const cpu = process.cpuUsage(cpu0);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await w.close();
  await q.close();
  return { consume_per_s: n / secs, cpu_us_per_op: (cpu.user + cpu.system) / n };
}

async function lateness(conn, name, rate, seconds) {
  const n = Math.round(rate * seconds);
  const q = new Queue(name, { connection: conn });
  const late = [];
  let finish;
  const all = new Promise((r) => (finish = r));
  const w = new Worker(name, async (job) => {
    late.push(Date.now() - (job.timestamp + job.opts.delay));
    if (late.length === n) finish();
  }, { connection: conn, concurrency: 100 });
  await w.waitUntilReady();
  await sleep(200);
  const t0 = Date.now();
  let sent = 0;
  while (sent < n) {
    const due = Math.min(n, Math.floor(((Date.now() - t0) * rate) / 1000) + 1);
    const jobs = [];
    for (; sent < due; sent++) jobs.push({ name: 'j', data: { i: sent }, opts: opts(20 + Math.floor(Math.random() * 1000)) });
    if (jobs.length) await q.addBulk(jobs);
    await sleep(1);
  }
  await all;
  late.sort((a, b) => a - b);
  await w.close();
  await q.close();
  return { n, p50_ms: pct(late, 50), p99_ms: pct(late, 99), max_ms: late[late.length - 1] };
}

async function commands(redis) {
  const info = await redis.info('stats');
  return Number(/total_commands_processed:(\d+)/.exec(info)[1]);
}

async function idle(conn, name, seconds) {
  const q = new Queue(name, { connection: conn });
  await q.add('far', {}, opts(3600000));
  const w = new Worker(name, async () => {}, { connection: conn, concurrency: 100 });
  await w.waitUntilReady();
  await sleep(1000);
  const probe = new Redis(conn);
  const c0 = await commands(probe);
  await sleep(seconds * 1000);
  const used = (await commands(probe)) - c0 - 1;
  probe.disconnect();
  await w.close();
  await q.obliterate({ force: true });
  await q.close();
  return { idle_cmds_per_s: used / seconds };
}

async function main() {
  const [mode, host, port, a, b] = process.argv.slice(2);
  const conn = { host, port: Number(port), maxRetriesPerRequest: null };
  const name = `bench-${mode}-${process.pid}`;
  let res;
  if (mode === 'push') res = await push(conn, name, Number(a));
  else if (mode === 'consume') res = await consume(conn, name, Number(a));
  else if (mode === 'lateness') res = await lateness(conn, name, Number(a), Number(b));
  else if (mode === 'idle') res = await idle(conn, name, Number(a));
  else throw new Error('usage: dq.js push|consume|lateness|idle HOST PORT ...');
  console.log(JSON.stringify(res));
}

main().then(() => process.exit(0), (e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
