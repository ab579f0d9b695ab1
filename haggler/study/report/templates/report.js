// Filters: show the transcripts of the chosen arm, buyer and scenario, and count them.
const sel = k => document.getElementById('f-' + k);
function filter() {
  let n = 0;
  for (const d of document.querySelectorAll('details.transcript')) {
    const ok = ['arm', 'buyer', 'scenario'].every(k => !sel(k).value || d.dataset[k] === sel(k).value);
    d.style.display = ok ? '' : 'none';
    if (ok) n++;
  }
  document.getElementById('shown').textContent = n + ' shown';
}
['arm', 'buyer', 'scenario'].forEach(k => sel(k).addEventListener('change', filter));
filter();
// report.html#t12 opens transcript 12: a link to one negotiation
const target = location.hash && document.getElementById(location.hash.slice(1));
if (target && target.tagName === 'DETAILS') { target.open = true; target.scrollIntoView(); }
