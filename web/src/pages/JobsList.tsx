import { useVirtualizer } from "@tanstack/react-virtual";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { api, buildUrl, type Heartbeats, type Job } from "../api/client";
import { Confirm } from "../components/Confirm";
import { HeartbeatBar } from "../components/Heartbeat";
import { Denied, errorText, Notice } from "../components/States";
import { localTime, zoneTime } from "../format";
import { Link, navigate } from "../router";
import { usePermission } from "../session";
import { groupTree, inGroup, type GroupNode } from "./groups";

const HEARTBEAT_POLL_MS = 15_000;
const HEARTBEAT_BUCKETS = 24;
const ROW_HEIGHT = 40; // pixels

type SortKey = "name" | "group_name" | "job_type" | "schedule_type" | "next_run_at";
type StateFilter = "" | "enabled" | "disabled";

interface Pending {
  text: string;
  action: string;
  run: () => Promise<void>;
}

export function state(job: Job): string {
  if (!job.enabled) return "disabled";
  if (job.group_gated) return "group disabled";
  return "enabled";
}

function schedule(job: Job): string {
  if (job.schedule_type === "one_off") return `once at ${localTime(job.run_at)}`;
  if (job.schedule_type === "webhook") return "webhook";
  return job.cron_expression;
}

export function JobsList() {
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [disabledGroups, setDisabledGroups] = useState<string[]>([]);
  const [serverZone, setServerZone] = useState("UTC");
  const [beats, setBeats] = useState<Heartbeats | null>(null);
  const [beatsFailed, setBeatsFailed] = useState(false);
  const [group, setGroup] = useState("");
  const [search, setSearch] = useState("");
  const [type, setType] = useState("");
  const [scheduleType, setScheduleType] = useState("");
  const [stateFilter, setStateFilter] = useState<StateFilter>("");
  const [sort, setSort] = useState<{ key: SortKey; up: boolean }>({ key: "name", up: true });
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [pending, setPending] = useState<Pending | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const writeDenied = usePermission("jobs:write");

  const load = useCallback(async () => {
    try {
      const [list, groups, meta] = await Promise.all([
        api("get", "/api/jobs"),
        api("get", "/api/groups/disabled"),
        api("get", "/api/meta"),
      ]);
      setJobs(list);
      setDisabledGroups(groups);
      setServerZone(meta.timezone);
      setLoadError(null);
    } catch (error) {
      setLoadError(errorText(error));
    }
  }, []);

  useEffect(() => {
    void load();
  }, [load]);

  useEffect(() => {
    let stopped = false;
    const poll = async () => {
      try {
        const next = await api("get", "/api/jobs/heartbeats", {
          query: { buckets: HEARTBEAT_BUCKETS },
        });
        if (!stopped) {
          setBeats(next);
          setBeatsFailed(false);
        }
      } catch {
        if (!stopped) setBeatsFailed(true);
      }
    };
    void poll();
    const timer = window.setInterval(() => void poll(), HEARTBEAT_POLL_MS);
    return () => {
      stopped = true;
      window.clearInterval(timer);
    };
  }, []);

  const beatsByJob = useMemo(
    () => new Map((beats?.jobs ?? []).map((j) => [j.job_id, j.buckets])),
    [beats],
  );
  const tree = useMemo(() => groupTree(jobs ?? []), [jobs]);

  const shown = useMemo(() => {
    const needle = search.trim().toLowerCase();
    const rows = (jobs ?? []).filter(
      (job) =>
        inGroup(job, group) &&
        (type === "" || job.job_type === type) &&
        (scheduleType === "" || job.schedule_type === scheduleType) &&
        (stateFilter === "" || (stateFilter === "enabled") === (state(job) === "enabled")) &&
        (needle === "" ||
          job.name.toLowerCase().includes(needle) ||
          job.group_name.toLowerCase().includes(needle) ||
          job.url.toLowerCase().includes(needle)),
    );
    const direction = sort.up ? 1 : -1;
    rows.sort((a, b) => {
      const left = a[sort.key] ?? "";
      const right = b[sort.key] ?? "";
      return left < right ? -direction : left > right ? direction : 0;
    });
    return rows;
  }, [jobs, group, search, type, scheduleType, stateFilter, sort]);

  const scroller = useRef<HTMLDivElement>(null);
  const virtual = useVirtualizer({
    count: shown.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => ROW_HEIGHT,
    overscan: 10,
  });

  const chosen = shown.filter((job) => selected.has(job.id));

  function toggle(id: string) {
    setSelected((current) => {
      const next = new Set(current);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  }

  function batch(verb: "enable" | "disable" | "delete") {
    const count = chosen.length;
    setPending({
      text: `${verb[0]?.toUpperCase()}${verb.slice(1)} ${count} job${count === 1 ? "" : "s"}?`,
      action: verb[0]?.toUpperCase() + verb.slice(1),
      run: async () => {
        const failures: string[] = [];
        for (const job of chosen) {
          try {
            if (verb === "delete") {
              await api("delete", "/api/jobs/{job_id}", { params: { job_id: job.id } });
            } else {
              await api("post", `/api/jobs/{job_id}/${verb}`, { params: { job_id: job.id } });
            }
          } catch (error) {
            failures.push(`${job.name}: ${errorText(error)}`);
          }
        }
        setSelected(new Set());
        setMessage(
          failures.length
            ? `Done, with ${failures.length} refused: ${failures.join("; ")}`
            : `${count} job${count === 1 ? "" : "s"} ${verb}d.`,
        );
        await load();
      },
    });
  }

  function toggleGroup(path: string, disabled: boolean) {
    const verb = disabled ? "enable" : "disable";
    setPending({
      text: disabled
        ? `Enable group ${path}? Its jobs run on their schedules again.`
        : `Disable group ${path}? None of its jobs, or those of groups below it, will run.`,
      action: disabled ? "Enable group" : "Disable group",
      run: async () => {
        await api("post", `/api/groups/${verb}`, { body: { group_name: path } });
        await load();
      },
    });
  }

  function sortBy(key: SortKey) {
    setSort((current) => ({ key, up: current.key === key ? !current.up : true }));
  }

  function header(key: SortKey, label: string) {
    const active = sort.key === key;
    return (
      <div
        role="columnheader"
        className={`cell col-${key}`}
        aria-sort={active ? (sort.up ? "ascending" : "descending") : "none"}
      >
        <button type="button" className="link" onClick={() => sortBy(key)}>
          {label}
          {active ? (sort.up ? " ▲" : " ▼") : ""}
        </button>
      </div>
    );
  }

  if (loadError) return <Notice kind="error" text={`The jobs could not be loaded: ${loadError}`} />;
  if (!jobs) return <Notice kind="loading" text="Loading jobs…" />;

  const renderGroups = (nodes: GroupNode[], depth: number) => (
    <ul className={depth ? "subgroups" : "groups"}>
      {nodes.map((node) => {
        const disabled = disabledGroups.includes(node.path);
        return (
          <li key={node.path}>
            <div className="group-row">
              <button
                type="button"
                className={`link group ${group === node.path ? "current" : ""}`}
                aria-current={group === node.path ? "true" : undefined}
                onClick={() => setGroup(node.path)}
              >
                {node.name} <span className="count">{node.count}</span>
                {disabled && <span className="badge">disabled</span>}
              </button>
              {!writeDenied && (
                <button
                  type="button"
                  className="link small"
                  aria-label={`${disabled ? "Enable" : "Disable"} group ${node.path}`}
                  onClick={() => toggleGroup(node.path, disabled)}
                >
                  {disabled ? "enable" : "disable"}
                </button>
              )}
            </div>
            {node.children.length > 0 && renderGroups(node.children, depth + 1)}
          </li>
        );
      })}
    </ul>
  );

  return (
    <div className="jobs-page">
      <aside className="sidebar" aria-label="Groups">
        <h2>Groups</h2>
        <button
          type="button"
          className={`link group ${group === "" ? "current" : ""}`}
          aria-current={group === "" ? "true" : undefined}
          onClick={() => setGroup("")}
        >
          All jobs <span className="count">{jobs.length}</span>
        </button>
        {renderGroups(tree, 0)}
      </aside>
      <section className="jobs-main" aria-label="Jobs">
        <div className="toolbar">
          <h1>Jobs</h1>
          {writeDenied ? (
            <Denied reason={writeDenied} />
          ) : (
            <>
              <Link to="/jobs/new" className="button">
                New job
              </Link>
              <Link to="/jobs/import" className="button secondary">
                Import CSV
              </Link>
            </>
          )}
          <a
            className="button secondary"
            href={buildUrl(
              "/api/jobs/export",
              {},
              {
                group,
                job_type: type,
                schedule_type: scheduleType,
                state: stateFilter,
                search: search.trim(),
              },
            )}
            download
            title="Downloads the jobs these filters show"
          >
            Export CSV
          </a>
        </div>
        <div className="filters">
          <label>
            Search
            <input
              type="search"
              value={search}
              placeholder="name, group or URL"
              onChange={(e) => setSearch(e.target.value)}
            />
          </label>
          <label>
            Type
            <select value={type} onChange={(e) => setType(e.target.value)}>
              <option value="">all</option>
              {["http", "bash", "javascript", "typescript", "groovy", "python"].map((t) => (
                <option key={t}>{t}</option>
              ))}
            </select>
          </label>
          <label>
            Schedule
            <select value={scheduleType} onChange={(e) => setScheduleType(e.target.value)}>
              <option value="">all</option>
              {["cron", "rate", "one_off", "webhook"].map((t) => (
                <option key={t}>{t}</option>
              ))}
            </select>
          </label>
          <label>
            State
            <select
              value={stateFilter}
              onChange={(e) => setStateFilter(e.target.value as StateFilter)}
            >
              <option value="">all</option>
              <option value="enabled">enabled</option>
              <option value="disabled">disabled</option>
            </select>
          </label>
          <span className="muted" role="status">
            {shown.length} of {jobs.length} jobs
          </span>
        </div>
        {message && (
          <p className="notice" role="status">
            {message}
          </p>
        )}
        {chosen.length > 0 && !writeDenied && (
          <div className="batch" role="region" aria-label="Selected jobs">
            <span>{chosen.length} selected</span>
            <button type="button" onClick={() => batch("enable")}>
              Enable
            </button>
            <button type="button" onClick={() => batch("disable")}>
              Disable
            </button>
            <button type="button" className="danger" onClick={() => batch("delete")}>
              Delete
            </button>
          </div>
        )}
        {jobs.length === 0 ? (
          <Notice kind="empty" text="No jobs yet. Create one with New job, or import a CSV." />
        ) : shown.length === 0 ? (
          <Notice kind="empty" text="No job matches these filters." />
        ) : (
          <div role="table" aria-label="Jobs" aria-rowcount={shown.length + 1} className="table">
            <div role="rowgroup">
              <div role="row" className="row head">
                <div role="columnheader" className="cell col-select">
                  {!writeDenied && (
                    <input
                      type="checkbox"
                      aria-label="Select all shown jobs"
                      checked={chosen.length === shown.length}
                      onChange={(e) =>
                        setSelected(new Set(e.target.checked ? shown.map((j) => j.id) : []))
                      }
                    />
                  )}
                </div>
                {header("name", "Name")}
                {header("group_name", "Group")}
                {header("job_type", "Type")}
                {header("schedule_type", "Schedule")}
                {header("next_run_at", "Next run")}
                <div role="columnheader" className="cell col-state">
                  State
                </div>
                <div role="columnheader" className="cell col-beat">
                  Heartbeat
                </div>
              </div>
            </div>
            <div ref={scroller} className="scroller" role="rowgroup">
              <div style={{ height: virtual.getTotalSize(), position: "relative" }}>
                {virtual.getVirtualItems().map((item) => {
                  const job = shown[item.index];
                  if (!job) return null;
                  return (
                    <div
                      role="row"
                      aria-rowindex={item.index + 2}
                      key={job.id}
                      className="row"
                      style={{
                        position: "absolute",
                        top: 0,
                        transform: `translateY(${item.start}px)`,
                        height: ROW_HEIGHT,
                      }}
                    >
                      <div role="cell" className="cell col-select">
                        {!writeDenied && (
                          <input
                            type="checkbox"
                            aria-label={`Select ${job.name}`}
                            checked={selected.has(job.id)}
                            onChange={() => toggle(job.id)}
                          />
                        )}
                      </div>
                      <div role="cell" className="cell col-name">
                        <Link to={`/jobs/${job.id}`}>{job.name}</Link>
                      </div>
                      <div role="cell" className="cell col-group_name">
                        {job.group_name || "—"}
                      </div>
                      <div role="cell" className="cell col-job_type">
                        {job.job_type}
                      </div>
                      <div role="cell" className="cell col-schedule_type">
                        {schedule(job)}
                      </div>
                      <div role="cell" className="cell col-next_run_at">
                        <time
                          dateTime={job.next_run_at ?? undefined}
                          title={zoneTime(job.next_run_at, job.timezone || serverZone)}
                        >
                          {localTime(job.next_run_at)}
                        </time>
                      </div>
                      <div
                        role="cell"
                        className={`cell col-state state-${state(job).replace(" ", "-")}`}
                      >
                        {state(job)}
                      </div>
                      <div role="cell" className="cell col-beat">
                        <HeartbeatBar buckets={beatsByJob.get(job.id)} failed={beatsFailed} />
                      </div>
                    </div>
                  );
                })}
              </div>
            </div>
          </div>
        )}
      </section>
      {pending && (
        <Confirm
          text={pending.text}
          action={pending.action}
          onCancel={() => setPending(null)}
          onConfirm={() => {
            const run = pending.run;
            setPending(null);
            run().catch((error: unknown) => setMessage(errorText(error)));
          }}
        />
      )}
    </div>
  );
}

export function openJob(id: string): void {
  navigate(`/jobs/${id}`);
}
