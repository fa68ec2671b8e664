"""The HTML report's stylesheet (inline: the page loads nothing from the network).

Kept apart from paraplan/reports/html.py, which builds the page's sections.
"""

CSS = """
:root{--ink:#111827;--muted:#6B7280;--line:#E5E7EB;--accent:#2F5DA8}
*{box-sizing:border-box}
body{margin:0;background:#F3F4F6;color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px}
header.top{background:#0F172A;color:#F9FAFB;border-radius:12px;padding:20px 24px;margin-bottom:18px}
header.top h1{margin:0 0 4px;font-size:22px}
header.top .plan{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;color:#CBD5E1}
.kpis{display:flex;flex-wrap:wrap;gap:10px;margin-top:14px}
.kpi{background:#1E293B;border-radius:8px;padding:8px 12px;min-width:120px}
.kpi b{display:block;font-size:18px}.kpi span{font-size:12px;color:#94A3B8}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin-top:12px;font-size:13px}
.facts dt{color:#94A3B8}.facts dd{margin:0}
section{background:#fff;border-radius:12px;padding:18px 22px;margin-bottom:18px;
box-shadow:0 1px 2px rgba(0,0,0,.06)}
section h2{margin:0 0 4px;font-size:17px}
p.note{margin:4px 0 10px;color:var(--muted);font-size:13px}
svg{display:block;max-width:100%;height:auto;margin:6px 0}
svg text{font:11px system-ui,sans-serif;fill:#374151}
svg text.lane{font-size:12px}svg text.tick{fill:#6B7280}
svg text.axis-label{fill:#6B7280;font-size:11px}
svg text.mb{fill:#fff;font-size:10px;font-weight:600}
svg text.total{font-size:12px}svg text.over{fill:#C0392B;font-weight:700}
svg text.tier-name{font-size:14px;font-weight:700}svg text.tier-info{fill:#4B5563}
svg text.pill-text{fill:#fff;font-size:12px;font-weight:700}
svg text.node-name{font-size:11px;font-weight:600}svg text.rank{font-size:8px;fill:#374151}
svg text.elided{fill:#6B7280;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0;font-size:12px;color:#374151}
.legend i,i.sw{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:5px;
vertical-align:-2px;border:1px solid rgba(0,0,0,.12)}
table{border-collapse:collapse;font-size:13px;margin-top:8px}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;vertical-align:top}
th{color:var(--muted);font-weight:600}
table.groups td:first-child{white-space:nowrap}
table.alts td.diff{background:#FEF3C7;font-weight:600}
table.alts td.best{background:#ECFDF5}
td.mono,span.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
ul.why{margin:6px 0 0 18px;padding:0}
footer{color:var(--muted);font-size:12px;text-align:center;margin-bottom:20px}
"""
