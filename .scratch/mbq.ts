import { QuotaService } from '../src/keys/quota-service.js';
import { BufferedCounterStore } from '../src/keys/counter-store.js';
const durable = { read: async () => 0, add: async () => {}, increment: async () => 1, decrement: async () => {}, flush: async () => {} } as any;
const store = new BufferedCounterStore(durable, 1e9);
const q = new QuotaService(store, () => Date.now());
const limits = { hourly: 1e9, daily: 1e9, monthly: 1e9 };
await q.consume('key:abc', limits);
let s = 0;
for (let r = 0; r < 3; r++) { const t = process.hrtime.bigint(); for (let i = 0; i < 300000; i++) { const h = q.consumeNow('key:abc', limits); if (h) s += h.ratelimit.length; } console.log('consumeNow', (Number(process.hrtime.bigint() - t) / 300000).toFixed(0), 'ns'); }
