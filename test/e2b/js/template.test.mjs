// Template builds with the SDK's Template API, then sandboxes from them.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import { Sandbox, Template, BuildError, waitForPort } from 'e2b'

const ctx = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'python', 'tpl_ctx')
const name = () => `js-tpl-${randomUUID().slice(0, 8)}`
const runId = randomUUID()

test('build, create with the start command running, rebuild from cache', async () => {
  const n = name()
  const logs = []
  const t = Template({ fileContextPath: ctx })
    .fromTemplate('base')
    // runId makes the step new to this machine's build cache (images stay
    // in the shared templates dir), so its output is in the logs.
    .runCmd(`echo js-output-$((6*7)) ${runId}`)
    .copy('hello.txt', '/home/user/hello.txt')
    .copy('app', '/app/', { user: 'root', mode: 0o755 })
    .setEnvs({ FOO: 'js' })
    .setWorkdir('/app')
    .setStartCmd('python3 -m http.server 8002', waitForPort(8002))
  const info = await Template.build(t, `${n}:v1`, { onBuildLogs: (e) => logs.push(String(e)) })
  assert.equal(info.templateId, n)
  assert.ok(logs.join('\n').includes('js-output-42'))
  assert.equal(await Template.exists(n), true)

  const sbx = await Sandbox.create(`${n}:v1`)
  try {
    const r = await sbx.commands.run("id -un; pwd; echo $FOO; cat /home/user/hello.txt; curl -s -o /dev/null -w '%{http_code}' http://localhost:8002/")
    assert.equal(r.stdout, 'user\n/app\njs\nhello from a template\n200')
  } finally {
    await sbx.kill()
  }

  logs.length = 0
  await Template.build(t, `${n}:v1`, { onBuildLogs: (e) => logs.push(String(e)) })
  assert.ok(!logs.join('\n').includes('js-output-42'), 'a cached step ran again')
})

test('a failing step raises BuildError with its exit code', async () => {
  const bad = Template().fromTemplate('base').runCmd('exit 9')
  await assert.rejects(Template.build(bad, name()), (err) => err instanceof BuildError && /exit code 9/.test(err.message))
})

test('fromBaseImage builds from the base template, no registry; skipCache runs every step again', async () => {
  const n = name()
  const logs = []
  const t = Template().fromBaseImage().runCmd(`echo js-base-image-${runId}`)
  await Template.build(t, `${n}:v1`, { skipCache: true, onBuildLogs: (e) => logs.push(String(e)) })
  assert.ok(logs.join('\n').includes(`js-base-image-${runId}`))
  logs.length = 0
  await Template.build(t, `${n}:v1`, { skipCache: true, onBuildLogs: (e) => logs.push(String(e)) })
  assert.ok(logs.join('\n').includes(`js-base-image-${runId}`))
  const info = await Template.assignTags(`${n}:v1`, ['production'])
  assert.ok(info.tags.includes('production'))
  const sbx = await Sandbox.create(`${n}:production`)
  try {
    assert.equal((await sbx.commands.run('id -un')).stdout, 'user\n')
  } finally {
    await sbx.kill()
  }
})
