import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { ListState, Outcome, useAction, useLoad } from "../../components/Load";
import { RowButton, Table, usePendingConfirm } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Denied } from "../../components/States";
import { localTime } from "../../format";
import { allows, useSession } from "../../session";

type Volume = Schemas["ScriptVolumeView"];

function WorkerStatus() {
  const status = useLoad(() => api("get", "/api/script-workers/status"));
  return (
    <>
      <h2>Script workers</h2>
      <ListState
        state={status}
        what="Worker status"
        empty="No script worker has reported yet: start one (zilean up starts them all) and wait a minute."
      >
        {(list) => (
          <Table
            label="Script workers"
            headers={["Queue", "Sandbox", "Volumes root", "Last report"]}
          >
            {list.map((w) => (
              <tr key={w.queue}>
                <td>{w.queue}</td>
                <td className={w.sandbox_enforced ? "" : "warning-text"}>
                  {w.sandbox_enforced ? "enforced" : "not enforced: scripts run unconfined"}
                </td>
                <td className={w.volumes_root_mounted ? "" : "warning-text"}>
                  {w.volumes_root_mounted ? "mounted" : "not mounted: volume jobs fail"}
                </td>
                <td>
                  {localTime(w.updated_at)}
                  {w.stale && <span className="badge">stale: no report for over 3 min</span>}
                </td>
              </tr>
            ))}
          </Table>
        )}
      </ListState>
    </>
  );
}

export function VolumesSection() {
  const { me } = useSession();
  const canWrite = allows(me, "scriptvolumes:write");
  const volumes = useLoad(() => api("get", "/api/script-volumes"));
  const { outcome, run } = useAction(volumes.reload);
  const [name, setName] = useState("");
  const [mode, setMode] = useState("ro");
  const [description, setDescription] = useState("");
  const confirm = usePendingConfirm<Volume>(
    (v) =>
      `Delete the catalog entry ${v.name}: its files stay on disk. It is refused while a job declares it. Undo by creating it again with the same name.`,
    "Delete",
    (v) => {
      void run(
        () => api("delete", "/api/script-volumes/{name}", { params: { name: v.name } }),
        `Deleted ${v.name}.`,
      );
    },
  );

  return (
    <>
      <SectionHead title="Script volumes">
        Named directories under the workers&apos; volumes root that script jobs may mount, each with
        the most access a job may ask for (ro or rw). scriptvolumes:read shows them and the
        workers&apos; checks; scriptvolumes:write changes them. Deleting an entry never deletes
        files.
      </SectionHead>
      <Outcome text={outcome} />
      {!canWrite && <Denied reason="Needs the scriptvolumes:write permission to change volumes." />}
      <ListState state={volumes} what="Volumes" empty="No script volumes yet.">
        {(list) => (
          <Table
            label="Script volumes"
            headers={["Name", "Most access", "Used by", "Description", canWrite && "Actions"]}
          >
            {list.map((v) => (
              <tr key={v.name}>
                <td className="mono">{v.name}</td>
                <td>
                  {canWrite ? (
                    <select
                      aria-label={`Most access for ${v.name}`}
                      value={v.max_mode}
                      onChange={(e) =>
                        void run(
                          () =>
                            api("put", "/api/script-volumes/{name}", {
                              params: { name: v.name },
                              body: { max_mode: e.target.value, description: v.description },
                            }),
                          `Saved ${v.name}.`,
                        )
                      }
                    >
                      <option value="ro">ro (read only)</option>
                      <option value="rw">rw (read and write)</option>
                    </select>
                  ) : (
                    v.max_mode
                  )}
                </td>
                <td>{v.usage} jobs</td>
                <td>{v.description || "—"}</td>
                {canWrite && (
                  <td>
                    <RowButton
                      label="Delete"
                      name={`Delete volume ${v.name}`}
                      kind="danger"
                      onClick={() => confirm.ask(v)}
                    />
                  </td>
                )}
              </tr>
            ))}
          </Table>
        )}
      </ListState>
      {canWrite && (
        <form
          className="stack card-inline"
          aria-label="New volume"
          onSubmit={(e) => {
            e.preventDefault();
            void run(
              () =>
                api("post", "/api/script-volumes", { body: { name, max_mode: mode, description } }),
              `Created ${name}.`,
            ).then((ok) => ok && setName(""));
          }}
        >
          <h2>New volume</h2>
          <label>
            Volume name
            <input value={name} onChange={(e) => setName(e.target.value)} required />
          </label>
          <label>
            Most access
            <select value={mode} onChange={(e) => setMode(e.target.value)}>
              <option value="ro">ro (read only)</option>
              <option value="rw">rw (read and write)</option>
            </select>
          </label>
          <label>
            Description
            <input value={description} onChange={(e) => setDescription(e.target.value)} />
          </label>
          <div className="row">
            <button type="submit">Create volume</button>
          </div>
        </form>
      )}
      <WorkerStatus />
      {confirm.dialog}
    </>
  );
}
