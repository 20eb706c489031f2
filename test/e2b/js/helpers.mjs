// Shared by the JS tests: the SDK is pointed at spaced only through
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (test/e2b/e2b_test.go sets them).
import { randomUUID } from 'node:crypto'
import { Sandbox } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} must be set (run through test/e2b/e2b_test.go)`)
}

export const API_URL = process.env.E2B_API_URL
export const SANDBOX_URL = process.env.E2B_SANDBOX_URL
export const API_KEY = process.env.E2B_API_KEY

export function testId() {
  return `js-${randomUUID().slice(0, 12)}`
}

// withSandbox creates a sandbox, runs fn and always kills the sandbox.
export async function withSandbox(fn, opts = {}) {
  const sbx = await Sandbox.create({ metadata: { sandboxTestId: testId() }, ...opts })
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}
