// A sandbox's metrics over time (getMetrics: GET /sandboxes/{id}/metrics) and
// its logs (the SDK's own API client: GET /v2/sandboxes/{id}/logs and
// /sandboxes/{id}/logs; the SDK has no logs method). spaced samples every
// running sandbox from the host every SPACE_METRICS_INTERVAL (1 s here).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { ApiClient, ConnectionConfig, Sandbox, SandboxNotFoundError } from 'e2b'
import { withSandbox } from './helpers.mjs'

async function waitMetrics(sbx, ok) {
  const deadline = Date.now() + 30_000
  for (;;) {
    const ms = await sbx.getMetrics()
    if (ok(ms)) return ms
    assert.ok(Date.now() < deadline, `metrics never as wanted: ${JSON.stringify(ms)}`)
    await sleep(500)
  }
}

test('metrics: a series sampled over time, bounded by start and end', async () => {
  await withSandbox(async (sbx) => {
    await sbx.commands.run('head -c 16000000 /dev/urandom > /home/user/blob')
    // One CPU spins until a sample shows it: at least 10% of one CPU (a host
    // loaded by the other suites gave a 5 s spin under 30% of one, CI run 27;
    // an idle sandbox is under 1%), then it stops.
    const spin = await sbx.commands.run("sh -c 'while :; do :; done'", { background: true })
    const ms = await waitMetrics(sbx, (ms) => ms.length >= 3 && ms.some((m) => m.cpuUsedPct * m.cpuCount >= 10) && ms.at(-1)?.diskUsed >= 16_000_000)
    await spin.kill()
    assert.ok(ms.length >= 3)
    for (const m of ms) {
      assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp))
      assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100)
      assert.ok(m.memUsed > 0 && m.memUsed < m.memTotal, JSON.stringify(m))
      assert.ok(m.diskUsed >= 0 && m.diskUsed <= m.diskTotal)
    }
    for (let i = 1; i < ms.length; i++) assert.ok(ms[i].timestamp > ms[i - 1].timestamp)
    const mid = ms[Math.floor(ms.length / 2)].timestamp
    const later = await Sandbox.getMetrics(sbx.sandboxId, { start: mid })
    assert.ok(later.length > 0 && later.length < (await sbx.getMetrics()).length)
    assert.ok(later.every((m) => m.timestamp.getTime() >= Math.floor(mid.getTime() / 1000) * 1000 - 500))
    assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3600_000) }), [])
    await assert.rejects(Sandbox.getMetrics('nosuchsandbox'), SandboxNotFoundError)
  })
})

test('logs: lifecycle and process lines, v2 query and the older endpoint', async () => {
  const api = new ApiClient(new ConnectionConfig()).api
  await withSandbox(async (sbx) => {
    await sbx.commands.run('echo js-log-probe')
    const logs = async (query) => {
      const res = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId }, query } })
      assert.equal(res.response.status, 200, JSON.stringify(res.error))
      return res.data.logs
    }
    const all = await logs({})
    const created = all.filter((e) => e.message === 'Sandbox created')
    assert.equal(created.length, 1)
    assert.equal(created[0].fields.source, 'spaced')
    const started = all.find((e) => e.fields.event_type === 'process_start' && e.fields.command.includes('js-log-probe'))
    assert.ok(started, JSON.stringify(all))
    assert.equal(started.message, `Process with pid ${started.fields.pid} started`)
    assert.equal(started.level, 'info')
    assert.equal(started.fields.source, 'agent')
    const ended = all.find((e) => e.message === `Process with pid ${started.fields.pid} ended`)
    assert.equal(ended?.fields.exit_code, '0')
    for (let i = 1; i < all.length; i++) assert.ok(all[i].timestamp >= all[i - 1].timestamp)

    const newest = await logs({ direction: 'backward', limit: 1 })
    assert.deepEqual(newest.map((e) => e.message), [all.at(-1).message])
    const found = await logs({ search: `pid ${started.fields.pid} ` })
    assert.deepEqual(found.map((e) => e.message), [started.message, ended.message])
    assert.ok((await logs({ level: 'warn' })).every((e) => e.level === 'warn' || e.level === 'error'))

    const v1 = await api.GET('/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 1000 } } })
    assert.equal(v1.response.status, 200)
    assert.deepEqual(v1.data.logs.map((l) => JSON.parse(l.line).message), all.map((e) => e.message))
    assert.deepEqual(v1.data.logEntries.map((e) => e.message), all.map((e) => e.message))

    const bad = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId }, query: { direction: 'sideways' } } })
    assert.equal(bad.response.status, 400)
    assert.equal(bad.error.code, 400)
    assert.match(bad.error.message, /direction/)
  })
  const gone = await api.GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: 'nosuchsandbox' } } })
  assert.equal(gone.response.status, 404)
})
