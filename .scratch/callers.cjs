const fs=require('fs');const p=JSON.parse(fs.readFileSync(process.argv[2]));const target=process.argv[3];
const byId=new Map();const parent=new Map();for(const n of p.nodes){byId.set(n.id,n);for(const c of n.children||[])parent.set(c,n.id);}
const cnt=new Map();for(let i=0;i<p.samples.length;i++)cnt.set(p.samples[i],(cnt.get(p.samples[i])||0)+p.timeDeltas[i]);
const agg=new Map();
for(const [id,t] of cnt){const n=byId.get(id);if(!(`${n.callFrame.functionName} ${n.callFrame.url}:${n.callFrame.lineNumber}`).includes(target))continue;
 let chain=[];let q=parent.get(id);for(let k=0;k<(+process.argv[4]||4)&&q!==undefined;k++){const m=byId.get(q);chain.push(`${m.callFrame.functionName||'anon'}@${m.callFrame.url.split('/').pop()}:${m.callFrame.lineNumber}`);q=parent.get(q);}
 const key=chain.join(' < ');agg.set(key,(agg.get(key)||0)+t);}
for(const [k,t] of [...agg].sort((a,b)=>b[1]-a[1]).slice(0,10))console.log((t/1000).toFixed(0).padStart(6),'ms',k);
