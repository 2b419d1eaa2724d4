import { useState } from "react";
import { api, type Schemas } from "../api/client";
import { Bars } from "../components/Bars";
import { Table } from "../components/Table";
import { Help } from "../components/Help";
import { ListState, useLoad } from "../components/Load";
import { bySlot, megabytes } from "../components/slots";
import { Denied, Notice } from "../components/States";
import { localTime } from "../format";
import { allows, usePermission, useSession } from "../session";

type History = Schemas["AllServicesHistory"];
const WINDOWS = [
  { since: "1h", label: "1 hour" },
  { since: "6h", label: "6 hours" },
  { since: "24h", label: "24 hours" },
  { since: "168h", label: "7 days" },
];

/** What to do when a service is not live: the command that runs it, and where to look. */
const REMEDY: Record<string, string> = {
  worker: "HTTP jobs wait in their queue. Start `zilean worker` (or `zilean up`) and read its log.",
  core: "The API, scheduler and sweeps are down. Start `zilean core`; it needs the database.",
  ui: "Sign-in and this app are served by it. Start `zilean ui`.",
  mcp: "Agents get no answer at /mcp. Start `zilean mcp`, or ignore it if MCP is off.",
  webhook: "Inbound webhook calls fail. Start `zilean webhook`.",
};

function remedy(service: string): string {
  if (service.startsWith("script-worker-")) {
    const runtime = service.replace("script-worker-", "");
    return `Script jobs of this runtime wait in their queue. Start \`zilean script-worker --runtime ${runtime}\`, or ignore it if you run no such jobs.`;
  }
  return REMEDY[service] ?? "Start the service and read its log.";
}

/** Text with `command` spans shown as code. */
function withCode(text: string): React.ReactNode[] {
  return text.split("`").map((part, i) => (i % 2 === 1 ? <code key={i}>{part}</code> : part));
}

function ServiceCharts(props: { history: History }) {
  const h = props.history;
  const services = Object.entries(h.samples_by_service) as [string, Schemas["SampleSlot"][]][];
  return (
    <div className="service-charts">
      {services.map(([service, samples]) => {
        const newest = samples[samples.length - 1];
        return (
          <figure key={service} className="service-chart">
            <figcaption>
              <strong>{service}</strong>{" "}
              {newest
                ? `now ${newest.cpu_percent.toFixed(1)} % CPU, ${megabytes(newest.rss_bytes)} MB resident`
                : "no sample in this window"}
            </figcaption>
            {samples.length > 0 && (
              <>
                <span className="muted">
                  CPU, % of one core (peak{" "}
                  {Math.max(...samples.map((s) => s.cpu_percent_max)).toFixed(1)})
                </span>
                <Bars
                  label={`${service} CPU, percent of one core: average per slot, peak behind`}
                  values={bySlot(h, samples, (s) => s.cpu_percent_max)}
                  overlay={bySlot(h, samples, (s) => s.cpu_percent)}
                  className="bar-max"
                  overlayClassName="bar-avg"
                />
                <span className="muted">
                  Resident memory, MB (peak{" "}
                  {megabytes(Math.max(...samples.map((s) => s.rss_bytes_max)))})
                </span>
                <Bars
                  label={`${service} resident memory in MB: average per slot, peak behind`}
                  values={bySlot(h, samples, (s) => megabytes(s.rss_bytes_max))}
                  overlay={bySlot(h, samples, (s) => megabytes(s.rss_bytes))}
                  className="bar-max"
                  overlayClassName="bar-avg"
                />
              </>
            )}
          </figure>
        );
      })}
    </div>
  );
}

function Metrics() {
  const [since, setSince] = useState("24h");
  const history = useLoad(
    () => api("get", "/api/metrics/history", { query: { since, service: "all", buckets: 60 } }),
    [since],
  );
  const h = history.data as History | null;
  const calls = h?.invocations ?? [];
  return (
    <section aria-label="Metrics">
      <div className="toolbar">
        <h2>Metrics</h2>
        <Help topic="what the figures mean">
          CPU is percent of one core (a process busy on two cores shows 200). Memory is the resident
          set: physical memory held now, shared libraries included. Under zilean up, core, ui, mcp
          and webhook share one process, so their lines are the same figures, not separate costs: do
          not add them up. Each slot shows its average in front of its peak. An empty slot had no
          sample. Invocations count every attempt, retries and loop iterations included.
        </Help>
        <label>
          Window
          <select value={since} onChange={(e) => setSince(e.target.value)}>
            {WINDOWS.map((w) => (
              <option key={w.since} value={w.since}>
                {w.label}
              </option>
            ))}
          </select>
        </label>
      </div>
      {history.error && (
        <Notice kind="error" text={`Metrics could not be read: ${history.error}`} />
      )}
      {!history.error && !h && <Notice kind="loading" text="Loading metrics…" />}
      {h && (
        <>
          <p className="muted">
            {h.slot_count} slots of {Math.round(h.bucket_width_seconds / 60)} min from{" "}
            {localTime(h.window_start)}.
          </p>
          <figure className="service-chart">
            <figcaption>
              <strong>Invocations, all jobs</strong>: {calls.reduce((n, b) => n + b.total, 0)}{" "}
              attempts, {calls.reduce((n, b) => n + b.failed, 0)} failed in this window (red)
            </figcaption>
            <Bars
              label="Attempts per slot across every job; failed ones in red"
              values={bySlot(h, calls, (b) => b.total)}
              overlay={bySlot(h, calls, (b) => b.failed)}
            />
          </figure>
          <ServiceCharts history={h} />
        </>
      )}
    </section>
  );
}

function Health() {
  const health = useLoad(() => api("get", "/api/system/health"));
  return (
    <section aria-label="System health">
      <div className="toolbar">
        <h2>System health</h2>
        <Help topic="system health">
          A service is live when it stored a sample in the last 2 minutes (HTTP services only when
          their own health check passed). A service you do not run shows as down; that is expected.
        </Help>
        <button type="button" className="secondary" onClick={() => void health.reload()}>
          Refresh
        </button>
      </div>
      <ListState state={health} what="Health" empty="No service reported.">
        {(list) => (
          <Table label="Services" headers={["Service", "State", "Last sample", "When down"]}>
            {list.map((s) => (
              <tr key={s.service}>
                <td>{s.service}</td>
                <td className={s.live ? "state-finished" : "state-failed"}>
                  {s.live ? "live" : s.last_sample_at ? "down" : "never seen"}
                </td>
                <td>{localTime(s.last_sample_at)}</td>
                <td>{s.live ? "—" : withCode(remedy(s.service))}</td>
              </tr>
            ))}
          </Table>
        )}
      </ListState>
    </section>
  );
}

function Liveness() {
  const liveness = useLoad(() => api("get", "/api/scripts/liveness"));
  const data = liveness.data;
  return (
    <section aria-label="Script runtimes">
      <h2>Script runtimes</h2>
      {liveness.error && (
        <Notice kind="error" text={`Liveness could not be read: ${liveness.error}`} />
      )}
      {!liveness.error && !data && <Notice kind="loading" text="Loading script runtimes…" />}
      {data && (
        <ul className="plain-list" aria-label="Script runtime liveness">
          {Object.entries(data).map(([runtime, l]) => (
            <li key={runtime}>
              <strong>{runtime}</strong>:{" "}
              {l.live
                ? `a worker is live (sampled ${localTime(l.last_sample_at)})`
                : "no live worker: its jobs wait in the queue until one starts"}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

export function Monitoring() {
  const { me } = useSession();
  const denied = usePermission("metrics:read");
  if (denied) {
    return (
      <section>
        <h1>Monitoring</h1>
        <Denied reason={denied} />
      </section>
    );
  }
  return (
    <div className="monitoring-page">
      <h1>Monitoring</h1>
      <Health />
      {allows(me, "jobs:script") && <Liveness />}
      <Metrics />
    </div>
  );
}
