const p=JSON.parse(require('fs').readFileSync(process.argv[2]));
const agg=new Map();let total=0;
(function walk(n,stack){const cf=n.callFrame;const name=`${cf.functionName||'anon'}@${cf.url.split('/').slice(-2).join('/')}:${cf.lineNumber}`;const st=[name,...stack].slice(0,4);if(n.selfSize){total+=n.selfSize;const k=st.join(' < ');agg.set(k,(agg.get(k)||0)+n.selfSize);}for(const c of n.children||[])walk(c,st);})(p.head,[]);
console.log('total MB',(total/1e6).toFixed(1));
for(const [k,v] of [...agg].sort((a,b)=>b[1]-a[1]).slice(0,25))console.log((v/1e6).toFixed(1).padStart(7),k);
