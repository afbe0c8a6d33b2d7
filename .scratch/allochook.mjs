import inspector from 'node:inspector';
import fs from 'node:fs';
const s = new inspector.Session(); s.connect();
s.post('HeapProfiler.enable');
s.post('HeapProfiler.startSampling', { samplingInterval: 32768, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
process.prependListener('SIGTERM', () => {
  s.post('HeapProfiler.stopSampling', (err, r) => { if (r) fs.writeFileSync(`/tmp/alloc-${process.pid}.json`, JSON.stringify(r.profile)); });
});
