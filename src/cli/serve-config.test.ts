// biome-ignore-all lint/suspicious/noExplicitAny: parsed Kubernetes objects, checked field by field
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { checkServeConfig, readServeConfig } from './serve-config.js';

const deploy = new URL('../../deploy/', import.meta.url).pathname;

test('deploy/upscope.yaml is a valid serve config', async () => {
  const config = await readServeConfig(`${deploy}upscope.yaml`);
  assert.deepEqual(
    config.aggregations.map((a) => [a.name, a.kind]),
    [
      ['malloc_sizes', 'hist'],
      ['connects', 'count'],
      ['read_latency', 'latency'],
    ],
  );
  assert.equal(config.listen, '0.0.0.0:9464');
});

test('checkServeConfig() names the first problem of a config', () => {
  const bad: [unknown, RegExp][] = [
    [[], /not a mapping/],
    [{ aggregations: [] }, /aggregations is not a list of at least one/],
    [{ listn: 1, aggregations: [] }, /unknown field "listn"/],
    [{ aggregations: [{ name: 'a-b', kind: 'count', specs: 'x:y' }] }, /name is not a name/],
    [{ aggregations: [{ name: 'a', kind: 'sum', specs: 'x:y' }] }, /kind is not count/],
    [{ aggregations: [{ name: 'a', kind: 'hist', specs: 'x:y' }] }, /\(hist\) has no value/],
    [
      { aggregations: [{ name: 'a', kind: 'latency', specs: 'x:y', by: 'comm' }] },
      /by is for count only/,
    ],
    [
      {
        aggregations: [
          { name: 'a', kind: 'count', specs: 'x:y' },
          { name: 'a', kind: 'count', specs: 'x:z' },
        ],
      },
      /two aggregations are named "a"/,
    ],
  ];
  for (const [raw, message] of bad) {
    assert.throws(
      () => checkServeConfig(raw, 'c.yaml'),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, 'ERR_CONFIG');
        assert.match(err.message, /^Cannot use the config "c\.yaml": /);
        assert.match(err.message, message);
        return true;
      },
    );
  }
});

test('the DaemonSet: hostPID, the capabilities, tracefs and bpffs mounted, readiness on /ready, the ConfigMap a valid config', () => {
  const docs = parseAllDocuments(readFileSync(`${deploy}daemonset.yaml`, 'utf8'));
  for (const doc of docs) assert.deepEqual(doc.errors, []);
  const objects = docs.map((d) => d.toJS()) as Record<string, any>[];
  const daemonSet = objects.find((o) => o['kind'] === 'DaemonSet')!;
  const pod = daemonSet['spec']['template']['spec'];
  assert.equal(pod.hostPID, true);
  const [container] = pod.containers;
  for (const cap of ['BPF', 'PERFMON', 'SYS_PTRACE']) {
    assert.ok(container.securityContext.capabilities.add.includes(cap), cap);
  }
  const mounts = new Map(container.volumeMounts.map((m: any) => [m.name, m.mountPath]));
  const volumes = new Map(pod.volumes.map((v: any) => [v.name, v.hostPath?.path]));
  for (const path of ['/sys/kernel/tracing', '/sys/fs/bpf']) {
    const volume = [...volumes].find(([, p]) => p === path)?.[0];
    assert.ok(volume !== undefined, path);
    assert.equal(mounts.get(volume), path);
  }
  assert.equal(container.readinessProbe.httpGet.path, '/ready');
  const port = container.ports.find((p: any) => p.name === container.readinessProbe.httpGet.port);
  const configMap = objects.find((o) => o['kind'] === 'ConfigMap')!;
  const config = checkServeConfig(
    parseAllDocuments(configMap['data']['upscope.yaml'])[0]!.toJS(),
    'ConfigMap',
  );
  assert.equal(config.listen, `0.0.0.0:${port.containerPort}`);
  assert.deepEqual(container.args, ['serve', '--config', '/etc/upscope/upscope.yaml']);
  const configMount = container.volumeMounts.find((m: any) => m.name === 'config');
  assert.equal(configMount.mountPath, '/etc/upscope');
});
