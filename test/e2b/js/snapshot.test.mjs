// Snapshots and filesystem-only pauses through the JS SDK: createSnapshot
// (memory and processes: the JS SDK asks for no other kind), create from a
// snapshot by id and by name, listSnapshots, deleteSnapshot, pause with
// keepMemory: false, and the lifecycle onTimeout object.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { InvalidArgumentError, Sandbox, SandboxError } from 'e2b'
import { API_KEY, API_URL, testId, withSandbox } from './helpers.mjs'

const BOOT_ID = '/proc/sys/kernel/random/boot_id'

async function sleeping(sbx) {
  return (await sbx.commands.run("pgrep -fx 'sleep 1000' || true")).stdout.split(/\s+/).filter(Boolean)
}

async function ids(paginator) {
  return (await paginator.nextItems()).map((s) => s.snapshotId)
}

async function pauseMode(id) {
  const r = await fetch(`${API_URL}/sandboxes/${id}`, { headers: { 'X-API-KEY': API_KEY } })
  return (await r.json()).pauseMode
}

test('snapshot: create, sandboxes from it by id and name, list, delete', async () => {
  await withSandbox(async (sbx) => {
    await sbx.files.write('/home/user/shared.txt', 'from the source')
    const bg = await sbx.commands.run('sleep 1000', { background: true })
    const snap = await sbx.createSnapshot()
    assert.ok(snap.snapshotId)
    assert.deepEqual(snap.names, [])
    const name = `js-snap-${testId()}`
    const named = await Sandbox.createSnapshot(sbx.sandboxId, { name })
    assert.equal(named.snapshotId, `${name}:default`)
    assert.deepEqual(named.names, [name])
    assert.equal(await sbx.isRunning(), true)
    try {
      const [a, b] = await Promise.all([Sandbox.create(snap.snapshotId), Sandbox.create(name)])
      try {
        for (const c of [a, b]) {
          assert.notEqual(c.sandboxId, sbx.sandboxId)
          assert.equal(await c.files.read('/home/user/shared.txt'), 'from the source')
          assert.deepEqual(await sleeping(c), [String(bg.pid)])
        }
        await a.files.write('/home/user/shared.txt', 'changed')
        assert.equal(await b.files.read('/home/user/shared.txt'), 'from the source')
      } finally {
        await a.kill()
        await b.kill()
      }
      assert.deepEqual((await ids(sbx.listSnapshots())).sort(), [snap.snapshotId, named.snapshotId].sort())
      assert.deepEqual(await ids(Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, name })), [named.snapshotId])
      assert.deepEqual(await ids(Sandbox.listSnapshots({ name: `${name}-nope` })), [])
      assert.ok((await ids(Sandbox.listSnapshots())).includes(snap.snapshotId))
    } finally {
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
      assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), true)
    }
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(name), (e) => e instanceof SandboxError && /404/.test(e.message))
    await assert.rejects(sbx.createSnapshot({ name: 'team/app' }), (e) => e instanceof SandboxError && /400/.test(e.message))
  })
})

test('snapshot: pause with keepMemory false keeps the disk and reboots', async () => {
  await withSandbox(async (sbx) => {
    await sbx.files.write('/home/user/marker.txt', 'persisted')
    await sbx.commands.run('sleep 1000', { background: true })
    const boot = (await sbx.files.read(BOOT_ID)).trim()
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    assert.equal(await sbx.pause({ keepMemory: false }), false)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    assert.equal(await pauseMode(sbx.sandboxId), 'filesystem')
    const again = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
    assert.equal(await again.files.read('/home/user/marker.txt'), 'persisted')
    assert.notEqual((await again.files.read(BOOT_ID)).trim(), boot)
    assert.deepEqual(await sleeping(again), [])

    // A pause that kept memory is not rebooted.
    assert.equal(await again.pause(), true)
    assert.equal(await pauseMode(sbx.sandboxId), 'full')
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' }), (e) => e instanceof SandboxError && /409/.test(e.message))
    await Sandbox.connect(sbx.sandboxId)
  })
})

test('snapshot: lifecycle onTimeout pause with keepMemory false', async () => {
  await assert.rejects(
    Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true } }),
    InvalidArgumentError,
  )
  const sbx = await Sandbox.create({ timeoutMs: 4_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  try {
    await sbx.files.write('/home/user/kept.txt', 'kept')
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
    const deadline = Date.now() + 30_000
    while ((await Sandbox.getInfo(sbx.sandboxId)).state !== 'paused') {
      assert.ok(Date.now() < deadline, 'not paused at its timeout')
      await new Promise((r) => setTimeout(r, 500))
    }
    assert.equal(await pauseMode(sbx.sandboxId), 'filesystem')
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
    assert.equal(await again.files.read('/home/user/kept.txt'), 'kept')
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
})
