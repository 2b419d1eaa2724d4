import { useState } from "react";
import { rawFetch } from "../api/client";
import { Denied, errorText, Notice } from "../components/States";
import { Link } from "../router";
import { usePermission } from "../session";

interface RowResult {
  row: number;
  status: "created" | "updated" | "skipped" | "error";
  job_id: string | null;
  name: string | null;
  group_name: string | null;
  error: string | null;
  webhook_url?: string;
}
interface Summary {
  created: number;
  updated: number;
  skipped: number;
  errors: number;
}

/** Read an NDJSON stream line by line as it arrives. */
async function* lines(response: Response): AsyncGenerator<unknown> {
  const reader = response.body?.getReader();
  if (!reader) return;
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    buffer += decoder.decode(value, { stream: !done });
    let newline = buffer.indexOf("\n");
    while (newline >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line) yield JSON.parse(line) as unknown;
      newline = buffer.indexOf("\n");
    }
    if (done) break;
  }
}

export function ImportJobs() {
  const [file, setFile] = useState<File | null>(null);
  const [collision, setCollision] = useState("skip");
  const [priority, setPriority] = useState("source");
  const [results, setResults] = useState<RowResult[]>([]);
  const [summary, setSummary] = useState<Summary | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const denied = usePermission("jobs:write");

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    if (!file) return;
    setBusy(true);
    setResults([]);
    setSummary(null);
    setError(null);
    const form = new FormData();
    form.set("file", file);
    form.set("on_collision", collision);
    form.set("merge_priority", priority);
    try {
      const response = await rawFetch("/api/jobs/import", { method: "POST", body: form });
      for await (const line of lines(response)) {
        if (line && typeof line === "object" && "summary" in line)
          setSummary(line.summary as Summary);
        else setResults((current) => [...current, line as RowResult]);
      }
    } catch (failure) {
      setError(errorText(failure));
    } finally {
      setBusy(false);
    }
  }

  if (denied) return <Notice kind="error" text={`You cannot import jobs. ${denied}`} />;
  return (
    <div className="import">
      <h1>Import jobs from CSV</h1>
      <p>
        Start from the <a href="/api/jobs/import/template">CSV template</a>, or from an{" "}
        <a href="/api/jobs/export">export</a>. A row matches an existing job by group and name.
      </p>
      <form onSubmit={submit} className="stack">
        <label>
          CSV file
          <input
            type="file"
            accept=".csv,text/csv"
            onChange={(e) => setFile(e.target.files?.[0] ?? null)}
            required
          />
        </label>
        <label>
          When a row matches an existing job
          <select value={collision} onChange={(e) => setCollision(e.target.value)}>
            <option value="skip">skip the row</option>
            <option value="overwrite">overwrite the job with the row</option>
            <option value="merge">merge the two</option>
          </select>
        </label>
        {collision === "merge" && (
          <label>
            Where both set a field
            <select value={priority} onChange={(e) => setPriority(e.target.value)}>
              <option value="source">the row wins</option>
              <option value="target">the existing job wins</option>
            </select>
          </label>
        )}
        <Denied reason={denied} />
        <button type="submit" disabled={busy || !file}>
          Import
        </button>
      </form>
      {error && <Notice kind="error" text={error} />}
      {busy && <Notice kind="loading" text="Importing…" />}
      {summary && (
        <p role="status" className="notice">
          {summary.created} created, {summary.updated} updated, {summary.skipped} skipped,{" "}
          {summary.errors} with errors.
        </p>
      )}
      {results.length > 0 && (
        <table className="results">
          <caption>Rows</caption>
          <thead>
            <tr>
              <th scope="col">Row</th>
              <th scope="col">Result</th>
              <th scope="col">Job</th>
              <th scope="col">Error</th>
            </tr>
          </thead>
          <tbody>
            {results.map((r) => (
              <tr key={r.row} className={`result-${r.status}`}>
                <td>{r.row}</td>
                <td>{r.status}</td>
                <td>
                  {r.job_id ? (
                    <Link to={`/jobs/${r.job_id}`}>{r.name ?? r.job_id}</Link>
                  ) : (
                    (r.name ?? "—")
                  )}
                </td>
                <td>{r.error ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
