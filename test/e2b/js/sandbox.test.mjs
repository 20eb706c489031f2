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

    const metrics = await sbx.getMetrics()
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

test('sandbox: pause is refused with a clear error', () =>
  withSandbox(async (sbx) => {
    await assert.rejects(sbx.pause(), (err) => {
      assert.ok(err instanceof SandboxError)
      assert.match(err.message, /501.*checkpoint/)
      return true
    })
    assert.equal(await sbx.isRunning(), true)
  }))

test('sandbox: wrong API key throws AuthenticationError', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '3'.repeat(40) }), AuthenticationError)
})
