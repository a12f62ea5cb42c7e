// drive.mjs loads pages in headless Chromium through a proxy, for
// rustle's e2e browser test (../browser_test.go), which writes the plan
// and reads the results.
//
// Usage: node drive.mjs PLAN.json
//
// PLAN.json:
//   {
//     "executablePath": "/usr/bin/chromium",
//     "timeoutMs": 15000,            // per page and for the launch
//     "watchdogMs": 45000,           // whole run: then kill Chromium and exit 3
//     "runs": [{
//       "name": "https-proxy",
//       "userDataDir": "/tmp/...",   // fresh, empty; one per run
//       "proxy": {"server": "https://127.0.0.1:PORT", "username": "u", "password": "p", "bypass": "<-loopback>"},
//                                    // (optional: without it Chromium follows its args, a --proxy-pac-url)
//       "ignoreHTTPSErrors": true,
//       "args": ["--disable-gpu", ...],
//       "pages": ["http://127.0.0.1:PORT/page", ...]
//     }]
//   }
//
// It writes one JSON object per line to stdout:
//   {"event":"launched","run":NAME,"pid":PID,"cmdline":[...]}
//   {"event":"page","run":NAME,"url":URL,"status":200,"state":"done","dom":{ID:TEXT,...},"error":""}
//   {"event":"closed","run":NAME}
// A page is finished when its script sets document.body.dataset.state to
// "done" or "error"; dom maps the id of every element that has one to its
// text. Failures to launch or load are reported in "error", and the
// script exits non-zero only when it could not run at all.

import { readFileSync, readdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// childPids returns the pids of this process's direct children (the
// browser Playwright spawned), from /proc.
function childPids() {
  const out = [];
  for (const ent of readdirSync('/proc')) {
    if (!/^\d+$/.test(ent)) continue;
    try {
      const stat = readFileSync(`/proc/${ent}/stat`, 'utf8');
      // Fields after the command name, which is in parentheses.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === process.pid) out.push(Number(ent));
    } catch {
      // The process went away while we looked.
    }
  }
  return out;
}

function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((s) => s !== '');
  } catch {
    return [];
  }
}

async function loadPage(context, run, url, timeoutMs) {
  const result = { event: 'page', run: run.name, url, status: 0, state: '', dom: {}, error: '' };
  const page = await context.newPage();
  try {
    const resp = await page.goto(url, { timeout: timeoutMs, waitUntil: 'load' });
    result.status = resp ? resp.status() : 0;
    if (result.status !== 200) throw new Error(`HTTP status ${result.status}`);
    await page.waitForFunction(
      () => document.body && ['done', 'error'].includes(document.body.dataset.state),
      null,
      { timeout: timeoutMs },
    );
    result.state = await page.evaluate(() => document.body.dataset.state);
  } catch (e) {
    result.error = String(e && e.message ? e.message : e).split('\n')[0];
  }
  try {
    result.dom = await page.evaluate(() =>
      Object.fromEntries([...document.querySelectorAll('[id]')].map((el) => [el.id, el.textContent])),
    );
  } catch (e) {
    if (!result.error) result.error = 'read DOM: ' + String(e && e.message ? e.message : e);
  }
  await page.close().catch(() => {});
  return result;
}

async function drive(plan, run) {
  const context = await chromium.launchPersistentContext(run.userDataDir, {
    executablePath: plan.executablePath,
    headless: true,
    chromiumSandbox: false,
    proxy: run.proxy,
    ignoreHTTPSErrors: !!run.ignoreHTTPSErrors,
    args: run.args || [],
    timeout: plan.timeoutMs,
    // Keep the test's environment: no proxy variables reach Chromium.
    env: { PATH: process.env.PATH || '/usr/bin:/bin', HOME: process.env.HOME || run.userDataDir },
  });
  try {
    const pids = childPids();
    emit({ event: 'launched', run: run.name, pid: pids[0] || 0, cmdline: pids.length ? cmdline(pids[0]) : [] });
    for (const url of run.pages) {
      emit(await loadPage(context, run, url, plan.timeoutMs));
    }
  } finally {
    await context.close();
  }
  emit({ event: 'closed', run: run.name });
}

// killChildren kills the browser Playwright started, and its process
// group (Playwright makes it a group leader, with its helpers inside).
function killChildren() {
  for (const pid of childPids()) {
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // Not a group leader, or gone already.
      }
    }
  }
}

async function main() {
  const plan = JSON.parse(readFileSync(process.argv[2], 'utf8'));
  if (plan.watchdogMs > 0) {
    setTimeout(() => {
      process.stderr.write(`drive.mjs: still running after ${plan.watchdogMs} ms; killing Chromium\n`);
      killChildren();
      process.exit(3);
    }, plan.watchdogMs).unref();
  }
  for (const run of plan.runs) {
    try {
      await drive(plan, run);
    } catch (e) {
      emit({ event: 'page', run: run.name, url: '', status: 0, state: '', dom: {}, error: 'launch: ' + String(e && e.message ? e.message : e).split('\n')[0] });
    }
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`drive.mjs: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);
