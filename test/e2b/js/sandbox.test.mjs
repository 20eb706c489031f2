import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { testId, withSandbox } from './helpers.mjs'

test('sandbox: getInfo, setTimeout, list by metadata, metrics, connect, kill', async () => {
  const id = testId()
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: id }, timeoutMs: 120_000 })
  try {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.sandboxTestId, id)
    await sbx.setTimeout(30_000)
    const left = new Date((await sbx.getInfo()).endAt).getTime() - Date.now()
    assert.ok(left > 20_000 && left <= 31_000, `${left}`)

    const listed = await Sandbox.list({ query: { metadata: { sandboxTestId: id } } }).nextItems()
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])

    // The first sample comes an interval or two after the create.
    let metrics = await sbx.getMetrics()
    for (let i = 0; i < 30 && metrics.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 500))
      metrics = await sbx.getMetrics()
    }
    assert.ok(metrics.length >= 1 && metrics[0].memTotal > 0)

    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await again.commands.run('echo again')).stdout, 'again\n')
    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('sandbox: pause, then connect resumes it with its files and processes', async () => {
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('/home/user/kept.txt', 'before pause')
    const bg = await sbx.commands.run('sleep 1000', { background: true })
    assert.equal(await sbx.pause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await again.files.read('/home/user/kept.txt'), 'before pause')
    assert.equal((await again.commands.run(`kill -0 ${bg.pid} && echo alive`)).stdout, 'alive\n')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})

test('sandbox: wrong API key throws AuthenticationError', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '3'.repeat(40) }), AuthenticationError)
})

test('sandbox: setTimeout(0) kills it now', async () => {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() } })
  try {
    await sbx.setTimeout(0)
    assert.equal(await sbx.isRunning(), false)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  } finally {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
  }
})
