const fs=require('fs');const p=JSON.parse(fs.readFileSync(process.argv[2]));
const byId=new Map();for(const n of p.nodes)byId.set(n.id,n);
const self=new Map();const dt=p.timeDeltas;const total=dt.reduce((a,b)=>a+b,0);
const cnt=new Map();for(let i=0;i<p.samples.length;i++){cnt.set(p.samples[i],(cnt.get(p.samples[i])||0)+dt[i]);}
const agg=new Map();
for(const [id,t] of cnt){const n=byId.get(id);const cf=n.callFrame;const k=`${cf.functionName||'(anon)'} ${cf.url.split('/').slice(-2).join('/')}:${cf.lineNumber}`;agg.set(k,(agg.get(k)||0)+t);}
const idle=[...agg].filter(([k])=>k.startsWith('(idle)')).reduce((a,[,t])=>a+t,0);
console.log('total ms',total/1000,'idle ms',idle/1000);
for(const [k,t] of [...agg].sort((a,b)=>b[1]-a[1]).slice(0,+process.argv[3]||40))console.log((t/(total-idle)*100).toFixed(1).padStart(5),k);
