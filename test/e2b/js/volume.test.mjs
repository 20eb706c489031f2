// Volumes through the JS SDK: Volume.create/getInfo/list/connect/destroy,
// the volume content API (E2B_VOLUME_API_URL, the volume's bearer token)
// and volumeMounts at Sandbox.create. One sandbox at a time mounts a volume
// read-write in spaced, so a second mount while the first runs is a 409.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { Sandbox, Volume, VolumeError, VolumePathNotFoundError } from 'e2b'
import { withSandbox } from './helpers.mjs'

const newName = () => `js-${randomUUID().slice(0, 10)}`

test('volume lifecycle and content', async () => {
  const name = newName()
  const vol = await Volume.create(name)
  try {
    assert.equal(vol.name, name)
    assert.ok(vol.volumeId && vol.token)
    const info = await Volume.getInfo(vol.volumeId)
    assert.equal(info.name, name)
    assert.equal(info.token, vol.token)
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
    const again = await Volume.connect(vol.volumeId)
    assert.equal(again.token, vol.token)

    const e = await vol.writeFile('/notes.txt', 'js notes', { mode: 0o644 })
    assert.equal(e.type, 'file')
    assert.equal(e.mode, 0o644)
    assert.ok(e.mtime instanceof Date)
    assert.equal(await vol.readFile('/notes.txt'), 'js notes')
    assert.deepEqual(await vol.readFile('/notes.txt', { format: 'bytes' }), new TextEncoder().encode('js notes'))
    assert.equal(await (await vol.readFile('/notes.txt', { format: 'blob' })).text(), 'js notes')

    await vol.makeDir('/nested/deep', { force: true })
    await vol.writeFile('/nested/deep/f.txt', 'deep')
    assert.deepEqual((await vol.list('/')).map((x) => x.name).sort(), ['nested', 'notes.txt'])
    const d = await vol.getInfo('/nested')
    assert.equal(d.type, 'directory')
    const m = await vol.updateMetadata('/notes.txt', { uid: 1001, gid: 1001, mode: 0o600 })
    assert.equal(m.uid, 1001)
    assert.equal(m.mode, 0o600)
    assert.equal(await vol.exists('/missing'), false)
    await assert.rejects(vol.readFile('/missing'), VolumePathNotFoundError)

    await withSandbox(async (sbx) => {
      assert.equal(await sbx.files.read('/mnt/vol/nested/deep/f.txt'), 'deep')
      await sbx.commands.run('echo from-js-sandbox > /mnt/vol/out.txt')
      assert.equal(await vol.readFile('/out.txt'), 'from-js-sandbox\n')
      const info = await sbx.getInfo()
      assert.deepEqual(info.volumeMounts, [{ name, path: '/mnt/vol' }])
      await assert.rejects(Sandbox.create({ volumeMounts: { '/mnt/vol': vol } }), /409/)
      await assert.rejects(Volume.destroy(vol.volumeId), VolumeError)
    }, { volumeMounts: { '/mnt/vol': vol } })

    await vol.remove('/nested')
    assert.equal(await vol.exists('/nested/deep/f.txt'), false)
    await assert.rejects(Sandbox.create({ volumeMounts: { '/etc': vol } }), /400/)
  } finally {
    assert.equal(await Volume.destroy(vol.volumeId), true)
  }
  assert.equal(await Volume.destroy(vol.volumeId), false)
})
