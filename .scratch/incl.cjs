const fs=require('fs');const p=JSON.parse(fs.readFileSync(process.argv[2]));
const byId=new Map();const parent=new Map();for(const n of p.nodes){byId.set(n.id,n);for(const c of n.children||[])parent.set(c,n.id);}
const cnt=new Map();let total=0,idle=0;for(let i=0;i<p.samples.length;i++){cnt.set(p.samples[i],(cnt.get(p.samples[i])||0)+p.timeDeltas[i]);total+=p.timeDeltas[i];}
const name=(n)=>`${n.callFrame.functionName||'anon'}@${n.callFrame.url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber}`;
const incl=new Map();
for(const [id,t] of cnt){const n=byId.get(id);if(n.callFrame.functionName==='(idle)'){idle+=t;continue;}const seen=new Set();let q=id;while(q!==undefined){const k=name(byId.get(q));if(!seen.has(k)){seen.add(k);incl.set(k,(incl.get(k)||0)+t);}q=parent.get(q);}}
const busy=total-idle;
for(const [k,t] of [...incl].sort((a,b)=>b[1]-a[1]).filter(([k])=>new RegExp(process.argv[3]||'.').test(k)).slice(0,+process.argv[4]||40))console.log((t/busy*100).toFixed(1).padStart(5),k);
