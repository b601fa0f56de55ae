// `upscope ui` refuses what is not its own page: a request without the token or with a wrong
// one, a Host header naming another host (DNS rebinding), an Origin of another site (a page
// elsewhere in the same browser) all get 403, and such a request to start a measurement
// attaches nothing (the same request with the right headers does: the check can fail). By
// default it listens on loopback only: this machine's other address refuses the connection;
// --listen elsewhere says loudly who can then probe processes.
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { probesHeldBy, type RunningUi, startUi } from '../helpers/ui-server.js';

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** One HTTP request with exactly these headers (Host included), to `address`. */
function request(
  address: { host: string; port: number },
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: address.host,
        port: address.port,
        path,
        method: options.method ?? 'GET',
        headers: options.headers,
        setHost: options.headers?.['host'] === undefined,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** Open the page's event stream and read its hello: the page's client id. */
function openStream(ui: RunningUi): Promise<{ client: string; close: () => void }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port: ui.port, path: `/api/events?token=${ui.token}` },
      (res) => {
        res.setEncoding('utf8');
        res.once('data', (chunk: string) => {
          const client = /"client":"([^"]+)"/.exec(chunk)?.[1];
          if (client === undefined) reject(new Error(`no hello: ${chunk}`));
          else resolve({ client, close: () => req.destroy() });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** An IPv4 address of this machine that is not loopback, if it has one. */
function otherAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return undefined;
}

function connects(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

test('upscope ui answers only its own page: token, Host and Origin are checked; a refused request attaches nothing', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['10', '1']);
  const ui = await startUi();
  const local = { host: '127.0.0.1', port: ui.port };
  const good = { host: `127.0.0.1:${ui.port}`, 'x-upscope-token': ui.token };
  try {
    await waitFor(target, /waiting/, 'stdout');
    assert.match(ui.spawned.stderr, /the page can probe processes as root/);
    // The page, and an API call, with the token: answered.
    assert.equal((await request(local, `/?token=${ui.token}`)).status, 200);
    assert.equal((await request(local, '/api/processes', { headers: good })).status, 200);
    // Through an ssh tunnel on another local port, the Host is still a loopback name.
    const tunnelled = { ...good, host: `localhost:9${ui.port % 1000}` };
    assert.equal((await request(local, '/api/processes', { headers: tunnelled })).status, 200);
    // Without the token, with a wrong one, a foreign Host, another site's Origin: 403.
    const refused: [string, Record<string, string>][] = [
      ['no token', { host: good.host }],
      ['a wrong token', { ...good, 'x-upscope-token': `${ui.token.slice(1)}x` }],
      ['a foreign Host', { ...good, host: `attacker.example:${ui.port}` }],
      ['a rebound name', { ...good, host: `127.0.0.1.nip.example:${ui.port}` }],
      ['another Origin', { ...good, origin: 'http://attacker.example' }],
      ['another port’s Origin', { ...good, origin: 'http://127.0.0.1:1' }],
    ];
    for (const [why, headers] of refused) {
      for (const path of [
        '/',
        '/app.js',
        '/api/processes',
        '/api/doctor',
        '/api/events',
        '/api/recording?id=r1',
        '/api/export/m1/json',
      ]) {
        const answer = await request(local, path, { headers });
        assert.equal(answer.status, 403, `${why}: GET ${path}`);
        assert.equal(answer.body, 'Forbidden\n', `${why}: nothing but the refusal`);
      }
    }
    // A measurement asked with each refused set of headers: 403, and nothing attached.
    const stream = await openStream(ui);
    const body = JSON.stringify({
      client: stream.client,
      kind: 'count',
      specs: [`${app}:work`],
      pid: target.pid,
    });
    for (const [why, headers] of refused) {
      const answer = await request(local, '/api/measure', {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body,
      });
      assert.equal(answer.status, 403, `${why}: POST /api/measure`);
      assert.deepEqual(probesHeldBy(ui.spawned.pid), [], `${why}: nothing attached`);
      // Nor a recording of its calls, nor a recording read from disk.
      for (const [path, asked] of [
        ['/api/record', { client: stream.client, pid: target.pid, targets: [`${app}:work`] }],
        ['/api/open', { client: stream.client, path: '/' }],
      ] as const) {
        const refusedPost = await request(local, path, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify(asked),
        });
        assert.equal(refusedPost.status, 403, `${why}: POST ${path}`);
      }
      assert.deepEqual(probesHeldBy(ui.spawned.pid), [], `${why}: nothing attached`);
    }
    // A form post (no JSON) from the page's own origin is not taken either.
    const form = await request(local, '/api/measure', {
      method: 'POST',
      headers: { ...good, 'content-type': 'text/plain' },
      body,
    });
    assert.equal(form.status, 415);
    assert.deepEqual(probesHeldBy(ui.spawned.pid), []);
    // The same request as the page sends it attaches: the checks above could have failed.
    const accepted = await request(local, '/api/measure', {
      method: 'POST',
      headers: {
        ...good,
        origin: `http://127.0.0.1:${ui.port}`,
        'content-type': 'application/json',
      },
      body,
    });
    assert.equal(accepted.status, 200, accepted.body);
    assert.ok(probesHeldBy(ui.spawned.pid).length > 0, 'the accepted request attached');
    // The stream closing (the page gone) detaches it.
    stream.close();
    await waitFor(ui.spawned, /page p\d+ gone: 1 measurements stopped, detached/);
    assert.deepEqual(probesHeldBy(ui.spawned.pid), []);

    // Loopback only: this machine's other address refuses the connection.
    const other = otherAddress();
    if (other === undefined) {
      t.diagnostic('this machine has no address but loopback: the reachability check is moot');
    } else {
      assert.equal(await connects(other, ui.port), false, `not reachable at ${other}`);
      assert.equal(await connects('127.0.0.1', ui.port), true);
    }
  } finally {
    ui.spawned.child.kill('SIGINT');
    const end = await ended(ui.spawned);
    target.child.kill('SIGKILL');
    await ended(target);
    assert.equal(end.code, 0, ui.spawned.stderr);
  }
  assert.deepEqual(leftovers(), []);
});

test('upscope ui --listen elsewhere warns loudly, and is then reachable there with the token', async (t) => {
  const other = otherAddress();
  if (other === undefined) {
    t.skip('this machine has no address but loopback');
    return;
  }
  const ui = await startUi(['--listen', '0.0.0.0:0']);
  try {
    assert.match(
      ui.spawned.stderr,
      /WARNING: listening on 0\.0\.0\.0:0, not only on this machine's loopback: whoever reaches this address with the URL below can attach probes to any process/,
    );
    const there = { host: other, port: ui.port };
    const headers = { host: `${other}:${ui.port}`, 'x-upscope-token': ui.token };
    assert.equal((await request(there, '/api/processes', { headers })).status, 200);
    // A name for that address is still refused (it could be rebound), the token still needed.
    const named = { ...headers, host: `upscope.example:${ui.port}` };
    assert.equal((await request(there, '/api/processes', { headers: named })).status, 403);
    assert.equal(
      (await request(there, '/api/processes', { headers: { host: headers.host } })).status,
      403,
    );
  } finally {
    ui.spawned.child.kill('SIGINT');
    await ended(ui.spawned);
  }
});
