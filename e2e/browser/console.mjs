// console.mjs drives headless Chromium step by step for rustle's e2e
// test of the admin page (../console_test.go): the test sends one JSON
// command per line on stdin and reads one JSON answer per line on
// stdout, so that it can make traffic between the steps.
//
// Usage: node console.mjs
//
// Commands ({"op": ..., ...}) and their answers ({"ok": true, ...} or
// {"ok": false, "error": "..."}):
//   launch  {executablePath, userDataDir, args, username, password, width, height}
//           starts Chromium (no proxy) with HTTP credentials for the
//           admin listener's Basic challenge; dialogs (confirm) are
//           accepted
//   goto    {url}                     -> {status}
//   wait    {selector, pattern, timeoutMs}
//           waits until the element's text matches the regular
//           expression pattern                                -> {text}
//   text    {selector}                -> {text} ("" when absent)
//   click   {selector}
//   fill    {selector, value}
//   screenshot {path}                 a full-page PNG
//   errors  {}                        -> {errors: [...]}: page errors
//           and console errors (CSP violations among them) so far
//   close   {}
// The process exits when stdin ends, closing Chromium.

import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

let context = null;
let page = null;
const errors = [];

function reply(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const ops = {
  async launch(c) {
    context = await chromium.launchPersistentContext(c.userDataDir, {
      executablePath: c.executablePath,
      headless: true,
      chromiumSandbox: false,
      args: c.args || [],
      timeout: 15000,
      httpCredentials: c.username ? { username: c.username, password: c.password } : undefined,
      viewport: { width: c.width || 1280, height: c.height || 900 },
      env: { PATH: process.env.PATH || '/usr/bin:/bin', HOME: process.env.HOME || c.userDataDir },
    });
    page = context.pages()[0] || (await context.newPage());
    page.on('dialog', (d) => d.accept().catch(() => {}));
    page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
    return {};
  },
  async goto(c) {
    const resp = await page.goto(c.url, { timeout: 15000, waitUntil: 'load' });
    return { status: resp ? resp.status() : 0 };
  },
  async wait(c) {
    const re = new RegExp(c.pattern);
    const deadline = Date.now() + (c.timeoutMs || 15000);
    let text = '';
    for (;;) {
      text = await page.evaluate((sel) => {
        const el = document.querySelector(sel);
        return el ? el.textContent : null;
      }, c.selector);
      if (text !== null && re.test(text)) return { text };
      if (Date.now() > deadline) throw new Error(`${c.selector}: ${JSON.stringify(text)} does not match /${c.pattern}/`);
      await new Promise((r) => setTimeout(r, 100));
    }
  },
  async text(c) {
    const text = await page.evaluate((sel) => {
      const el = document.querySelector(sel);
      return el ? el.textContent : '';
    }, c.selector);
    return { text };
  },
  async click(c) {
    await page.click(c.selector, { timeout: 10000 });
    return {};
  },
  async fill(c) {
    await page.fill(c.selector, c.value, { timeout: 10000 });
    return {};
  },
  async screenshot(c) {
    await page.screenshot({ path: c.path, fullPage: true });
    return {};
  },
  async errors() {
    return { errors };
  },
  async close() {
    if (context) await context.close();
    context = null;
    return {};
  },
};

async function main() {
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let c;
    try {
      c = JSON.parse(line);
      const fn = ops[c.op];
      if (!fn) throw new Error(`unknown op ${c.op}`);
      reply({ ok: true, ...(await fn(c)) });
    } catch (e) {
      reply({ ok: false, error: String(e && e.message ? e.message : e).split('\n')[0] });
    }
  }
  if (context) await context.close().catch(() => {});
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`console.mjs: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);
