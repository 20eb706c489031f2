// The unmodified @e2b/code-interpreter SDK, in E2B_DEBUG mode (Sandbox.create()
// calls no API and the code interpreter is http://localhost:49999, where
// interpreter_test.go serves space-interpreter) or through spaced (a real
// sandbox of the code-interpreter-v1 template).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import os from 'node:os'
import fs from 'node:fs'
import path from 'node:path'
import { Sandbox } from '@e2b/code-interpreter'

const debug = process.env.E2B_DEBUG === 'true'
let sandbox
before(async () => {
  assert.ok(debug || process.env.E2B_API_URL, 'run through interpreter_test.go')
  sandbox = await Sandbox.create()
})
after(async () => {
  if (!debug) await sandbox.kill()
})

// workdir is a directory for a context's cwd, where the kernels run.
async function workdir() {
  if (debug) return fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-js-'))
  const dir = `/home/user/ctx-${Math.random().toString(36).slice(2, 10)}`
  await sandbox.files.makeDir(dir)
  return dir
}

test('value', async () => {
  const execution = await sandbox.runCode('1 + 1')
  assert.equal(execution.text, '2')
  assert.equal(execution.error, undefined)
  assert.ok(execution.executionCount >= 1)
})

test('print', async () => {
  const execution = await sandbox.runCode("print('hello')\nimport sys; print('warn', file=sys.stderr)")
  assert.deepEqual(execution.logs.stdout, ['hello\n'])
  assert.deepEqual(execution.logs.stderr, ['warn\n'])
})

test('error', async () => {
  const execution = await sandbox.runCode("raise KeyError('k')")
  assert.equal(execution.error.name, 'KeyError')
  assert.equal(execution.error.value, "'k'")
  assert.match(execution.error.traceback, /KeyError/)
})

test('dataframe', async () => {
  const execution = await sandbox.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
  const [result] = execution.results
  assert.ok(result.isMainResult)
  assert.deepEqual(result.data, { a: [1, 2], b: ['x', 'y'] })
  assert.match(result.html, /<table/)
  // Exactly E2B's keys: nothing leaks into extra.
  assert.deepEqual(result.extra, {})
  assert.deepEqual(result.formats().sort(), ['data', 'html'])
})

test('chart', async () => {
  const execution = await sandbox.runCode(
    "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6]); plt.title('line'); plt.show()")
  const [result] = execution.results
  assert.equal(result.isMainResult, false)
  assert.ok(result.png.length > 1000)
  assert.equal(result.chart.type, 'line')
  assert.equal(result.chart.title, 'line')
  assert.deepEqual(result.chart.elements[0].points, [[1, 4], [2, 5], [3, 6]])
})

test('bar chart', async () => {
  const execution = await sandbox.runCode(
    "import matplotlib.pyplot as plt\nplt.bar(['a', 'b', 'c'], [3, 4, 5]); plt.title('bars'); plt.xlabel('key'); plt.ylabel('count'); plt.show()")
  assert.equal(execution.error, undefined)
  const [result] = execution.results
  assert.ok(result.png.length > 1000)
  assert.equal(result.chart.type, 'bar')
  assert.equal(result.chart.title, 'bars')
  assert.equal(result.chart.x_label, 'key')
  assert.equal(result.chart.y_label, 'count')
  assert.deepEqual(result.chart.elements.map((e) => [e.label, e.value]), [['a', 3], ['b', 4], ['c', 5]])
})

test('several displays in one cell', async () => {
  const execution = await sandbox.runCode([
    'import pandas as pd',
    'from IPython.display import HTML, Markdown, display',
    'display(1)',
    "display('two')",
    "display(HTML('<b>three</b>'), Markdown('# four'))",
    "display(pd.DataFrame({'n': [5]}))",
    '6',
  ].join('\n'))
  assert.equal(execution.error, undefined)
  const results = execution.results
  assert.deepEqual(results.map((r) => r.isMainResult), [false, false, false, false, false, true])
  assert.deepEqual(results.slice(0, 2).map((r) => r.text), ['1', 'two'])
  assert.equal(results[2].html, '<b>three</b>')
  assert.equal(results[3].markdown, '# four')
  assert.deepEqual(results[4].data, { n: [5] })
  assert.equal(execution.text, '6')
})

test('two contexts at once', async () => {
  // Each cell waits for the other's file: they finish only if both run at
  // the same time, in contexts of their own.
  const dir = await workdir()
  const a = await sandbox.createCodeContext({ cwd: dir })
  const b = await sandbox.createCodeContext({ cwd: dir })
  try {
    const cell = (me, other) => [
      'import os, time',
      `me, other = '${me}', '${other}'`,
      "open(me, 'w').close()",
      'for _ in range(600):',
      '    if os.path.exists(other):',
      '        break',
      '    time.sleep(0.05)',
      'who = me',
      'os.path.exists(other)',
    ].join('\n')
    const runs = await Promise.all([
      sandbox.runCode(cell('a', 'b'), { context: a }),
      sandbox.runCode(cell('b', 'a'), { context: b }),
    ])
    assert.deepEqual(runs.map((r) => r.text), ['True', 'True'])
    assert.equal((await sandbox.runCode('who', { context: a })).text, 'a')
    assert.equal((await sandbox.runCode('who', { context: b })).text, 'b')
  } finally {
    await sandbox.removeCodeContext(a)
    await sandbox.removeCodeContext(b)
  }
})

test('callbacks in order', async () => {
  const events = []
  const execution = await sandbox.runCode(
    "import sys, time\nprint('one', flush=True)\ntime.sleep(0.3)\ndisplay(5)\nprint('two', file=sys.stderr, flush=True)\n'end'",
    {
      onStdout: (m) => events.push(['stdout', m.line]),
      onStderr: (m) => events.push(['stderr', m.line]),
      onResult: (r) => events.push(['result', r.text]),
    })
  assert.deepEqual(events, [['stdout', 'one\n'], ['result', '5'], ['stderr', 'two\n'], ['result', 'end']])
  assert.equal(execution.text, 'end')
})

test('contexts', async () => {
  const dir = await workdir()
  const ctx = await sandbox.createCodeContext({ cwd: dir, language: 'python' })
  assert.equal(ctx.cwd, dir)
  assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === ctx.id))
  await sandbox.runCode('y = 7', { context: ctx })
  assert.equal((await sandbox.runCode('y * 6', { context: ctx })).text, '42')
  assert.equal((await sandbox.runCode('import os; os.getcwd()', { context: ctx })).text, dir)
  await sandbox.restartCodeContext(ctx)
  assert.equal((await sandbox.runCode('y', { context: ctx })).error.name, 'NameError')
  await sandbox.removeCodeContext(ctx.id)
  assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === ctx.id))
  await assert.rejects(sandbox.removeCodeContext(ctx.id), (err) => err.name === 'NotFoundError')
})

test('envs', async () => {
  const execution = await sandbox.runCode("import os\nos.environ['SDK_VAR']", { envs: { SDK_VAR: 'from js' } })
  assert.equal(execution.text, 'from js')
  assert.equal((await sandbox.runCode("import os\nos.environ.get('SDK_VAR', 'unset')")).text, 'unset')
})

test('timeout, then the next cell runs', async () => {
  const ctx = await sandbox.createCodeContext()
  const start = Date.now()
  await assert.rejects(
    sandbox.runCode('import time\ntime.sleep(30)\nfinished = True', { context: ctx, timeoutMs: 2000 }),
    (err) => err.name === 'TimeoutError')
  assert.ok(Date.now() - start < 10000)
  const next = Date.now()
  assert.equal((await sandbox.runCode("'finished' in globals()", { context: ctx })).text, 'False')
  assert.ok(Date.now() - next < 5000, 'the timed-out cell was not interrupted')
  await sandbox.removeCodeContext(ctx)
})

test('bash', async () => {
  const execution = await sandbox.runCode('echo hello from bash', { language: 'bash' })
  assert.deepEqual(execution.logs.stdout, ['hello from bash\n'])
  assert.equal(execution.error, undefined)
  // runCode with a language uses that language's default context.
  await sandbox.runCode('export SDK_BASH=kept', { language: 'bash' })
  assert.deepEqual((await sandbox.runCode('echo $SDK_BASH', { language: 'bash' })).logs.stdout, ['kept\n'])
  const failed = await sandbox.runCode('ls /nonexistent-sdk', { language: 'bash' })
  assert.equal(failed.error.name, 'ExitStatus')
  assert.equal(failed.error.value, '2')

  const dir = await workdir()
  const ctx = await sandbox.createCodeContext({ cwd: dir, language: 'bash' })
  assert.equal(ctx.language, 'bash')
  assert.deepEqual((await sandbox.runCode('pwd', { context: ctx })).logs.stdout, [dir + '\n'])
  const env = await sandbox.runCode('printf "%s\\n" "$SDK_VAR"', { context: ctx, envs: { SDK_VAR: "it's set" } })
  assert.deepEqual(env.logs.stdout, ["it's set\n"])
  assert.deepEqual((await sandbox.runCode('echo "${SDK_VAR-unset}"', { context: ctx })).logs.stdout, ['unset\n'])
  await sandbox.removeCodeContext(ctx)
})

test('javascript and typescript', async () => {
  const execution = await sandbox.runCode("console.log('hi'); 6 * 7", { language: 'js' })
  assert.equal(execution.text, '42')
  assert.deepEqual(execution.logs.stdout, ['hi\n'])
  assert.equal((await sandbox.runCode('const n: number = 21\nn * 2', { language: 'typescript' })).text, '42')
  const failed = await sandbox.runCode("throw new TypeError('bad')", { language: 'javascript' })
  assert.equal(failed.error.name, 'TypeError')
  assert.equal(failed.error.value, 'bad')
})

// Issue 25: E2B's behaviour a user moving from it relies on (the Python
// SDK's test_parity.py has the rest).
test('a context in /root (kernels run as root, as on E2B)', async () => {
  const ctx = await sandbox.createCodeContext({ cwd: '/root' })
  try {
    assert.equal(ctx.cwd, '/root')
    const execution = await sandbox.runCode('import os; (os.getcwd(), os.getuid())', { context: ctx })
    assert.equal(execution.error, undefined)
    assert.equal(execution.text, "('/root', 0)")
  } finally {
    await sandbox.removeCodeContext(ctx)
  }
  const missing = `/no-such-dir-${Math.random().toString(36).slice(2, 10)}`
  await assert.rejects(sandbox.createCodeContext({ cwd: missing }), (err) => {
    // The SDK shows the body (which names the directory) only with its
    // includeDiagnostics; the status is a 4xx, never a 500.
    assert.match(err.message, /^400 Bad Request/)
    return true
  })
})

test('an image Pillow saves is a PNG result, as on E2B', async () => {
  const dir = await workdir()
  const ctx = await sandbox.createCodeContext({ cwd: dir })
  try {
    const execution = await sandbox.runCode(
      "import numpy\nfrom PIL import Image\n" +
        "Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype('uint8')).save('test.png')",
      { context: ctx },
    )
    assert.equal(execution.error, undefined)
    assert.equal(execution.results.length, 1)
    assert.ok(execution.results[0].png)
  } finally {
    await sandbox.removeCodeContext(ctx)
  }
})
