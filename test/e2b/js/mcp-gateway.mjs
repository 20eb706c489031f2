// E2B's MCP gateway through the JS SDK and the official MCP client
// (@modelcontextprotocol/sdk, streamable HTTP). Run by test/e2b/mcp_test.go
// once it has built the mcp-gateway template; not a *.test.mjs, so the
// main SDK suite (whose spaced has no such template) leaves it out.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import test from 'node:test'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Sandbox } from 'e2b'
import { testId } from './helpers.mjs'

// getMcpUrl() is https://<port>-<id>.<domain>/mcp, as on E2B; spaced's
// listener here speaks plain HTTP.
function plain(url) {
  assert.ok(url.startsWith('https://'), url)
  return 'http://' + url.slice('https://'.length)
}

test('tools through the gateway', async () => {
  const sbx = await Sandbox.create({
    mcp: { time: {}, filesystem: { paths: ['/home/user'] } },
    metadata: { sandboxTestId: testId() },
  })
  try {
    const url = sbx.getMcpUrl()
    assert.equal(url, `https://${sbx.getHost(50005)}/mcp`)
    const token = await sbx.getMcpToken()
    assert.match(token, /^[0-9a-f-]{36}$/)
    // A fresh handle reads the token from the sandbox, as the SDK does.
    assert.equal(await (await Sandbox.connect(sbx.sandboxId)).getMcpToken(), token)

    await sbx.files.write('/home/user/js.txt', 'from js')
    const client = new Client({ name: 'space-test', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(plain(url)), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }))
    try {
      const names = (await client.listTools()).tools.map((t) => t.name)
      for (const want of ['get_current_time', 'convert_time', 'read_text_file', 'list_directory']) {
        assert.ok(names.includes(want), names.join(','))
      }
      const now = await client.callTool({ name: 'get_current_time', arguments: { timezone: 'Europe/Paris' } })
      assert.equal(JSON.parse(now.content[0].text).timezone, 'Europe/Paris')
      const file = await client.callTool({ name: 'read_text_file', arguments: { path: '/home/user/js.txt' } })
      assert.equal(file.content[0].text, 'from js')
    } finally {
      await client.close()
    }

    // Red team: without the token (or with another) the gateway answers
    // 401; the control, with it, is served.
    const init = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } })
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }
    for (const auth of [undefined, `Bearer ${randomUUID()}`]) {
      const res = await fetch(plain(url), { method: 'POST', body: init, headers: auth ? { ...headers, Authorization: auth } : headers })
      assert.equal(res.status, 401)
    }
    const ok = await fetch(plain(url), { method: 'POST', body: init, headers: { ...headers, Authorization: `Bearer ${token}` } })
    assert.equal(ok.status, 200)
    await ok.body?.cancel()
  } finally {
    await sbx.kill()
  }
})

test('a failing gateway kills the sandbox', async () => {
  const metadata = { sandboxTestId: testId() }
  await assert.rejects(
    Sandbox.create({ mcp: { invalid_server: {} }, metadata }),
    (e) => e.message.startsWith('Failed to start MCP gateway') && e.message.includes('unknown MCP server "invalid_server"'),
  )
  assert.deepEqual(await Sandbox.list({ query: { metadata } }).nextItems(), [])
})
