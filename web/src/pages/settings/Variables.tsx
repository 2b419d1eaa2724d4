import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { Help } from "../../components/Help";
import { ListState, Outcome, useAction, useLoad } from "../../components/Load";
import { RowButton, Table, usePendingConfirm } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Denied } from "../../components/States";
import { allows, useSession } from "../../session";

type Variable = Schemas["GlobalVariableView"];
interface Draft {
  id: string | null;
  name: string;
  value: string;
  is_secret: boolean;
  allow_in_scripts: boolean;
}
const BLANK: Draft = { id: null, name: "", value: "", is_secret: false, allow_in_scripts: false };

export function VariablesSection() {
  const { me } = useSession();
  const canWrite = allows(me, "globalvars:write");
  const vars = useLoad(() => api("get", "/api/global-variables"));
  const { outcome, run } = useAction(vars.reload);
  const [draft, setDraft] = useState<Draft>(BLANK);
  const confirm = usePendingConfirm<Variable>(
    (v) =>
      `Delete ${v.name}: jobs that use {{${v.name}}} fail to resolve it from their next attempt. It cannot be undone; create it again with its value.`,
    "Delete",
    (v) => {
      void run(
        () =>
          api("delete", "/api/global-variables/{variable_id}", {
            params: { variable_id: v.id },
          }),
        `Deleted ${v.name}.`,
      );
    },
  );

  function save() {
    const body = {
      name: draft.name,
      value: draft.value,
      is_secret: draft.is_secret,
      allow_in_scripts: draft.allow_in_scripts,
    };
    const id = draft.id;
    void run(
      () =>
        id
          ? api("put", "/api/global-variables/{variable_id}", {
              params: { variable_id: id },
              body,
            })
          : api("post", "/api/global-variables", { body }),
      `Saved ${draft.name}.`,
    ).then((ok) => ok && setDraft(BLANK));
  }

  return (
    <>
      <SectionHead title="Global variables">
        Values jobs use as {"{{name}}"} in URLs, headers, bodies and auth. globalvars:read shows
        them, globalvars:write changes them. A secret&apos;s value is write-only: nobody can read it
        back, here or through the API. Every change is audited without the value.
      </SectionHead>
      <Outcome text={outcome} />
      {!canWrite && <Denied reason="Needs the globalvars:write permission to change variables." />}
      <ListState state={vars} what="Variables" empty="No global variables yet.">
        {(list) => (
          <Table
            label="Global variables"
            headers={["Name", "Value", "In scripts", canWrite && "Actions"]}
          >
            {list.map((v) => (
              <tr key={v.id}>
                <td className="mono">{v.name}</td>
                <td className="mono">
                  {v.is_secret
                    ? v.has_value
                      ? "secret (set, hidden)"
                      : "secret (empty)"
                    : v.value}
                </td>
                <td>{v.allow_in_scripts ? "allowed" : "no"}</td>
                {canWrite && (
                  <td>
                    <div className="row">
                      <button
                        type="button"
                        className="small secondary"
                        aria-label={`Edit ${v.name}`}
                        onClick={() =>
                          setDraft({
                            id: v.id,
                            name: v.name,
                            value: v.is_secret ? "" : v.value,
                            is_secret: v.is_secret,
                            allow_in_scripts: v.allow_in_scripts,
                          })
                        }
                      >
                        Edit
                      </button>
                      <RowButton
                        label="Delete"
                        name={`Delete ${v.name}`}
                        kind="danger"
                        onClick={() => confirm.ask(v)}
                      />
                    </div>
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
          aria-label={draft.id ? `Edit ${draft.name}` : "New variable"}
          onSubmit={(e) => {
            e.preventDefault();
            save();
          }}
        >
          <h2>{draft.id ? `Edit ${draft.name}` : "New variable"}</h2>
          <label>
            Variable name
            <input
              value={draft.name}
              pattern="[A-Za-z0-9_]+"
              onChange={(e) => setDraft({ ...draft, name: e.target.value })}
              required
            />
          </label>
          <label className="choice">
            <input
              type="checkbox"
              checked={draft.is_secret}
              onChange={(e) => setDraft({ ...draft, is_secret: e.target.checked })}
            />
            Secret (write-only)
          </label>
          <label>
            Value
            <input
              type={draft.is_secret ? "password" : "text"}
              autoComplete="off"
              value={draft.value}
              placeholder={
                draft.id && draft.is_secret ? "leave empty to keep the stored value" : ""
              }
              onChange={(e) => setDraft({ ...draft, value: e.target.value })}
            />
          </label>
          <label className="choice">
            <input
              type="checkbox"
              checked={draft.allow_in_scripts}
              onChange={(e) => setDraft({ ...draft, allow_in_scripts: e.target.checked })}
            />
            Allow in scripts
          </label>
          {draft.allow_in_scripts && (
            <p className="warning" role="note">
              A script job that names this secret (which needs jobs:script and globalvars:write)
              gets its value as GLOBALVAR_{draft.name.toUpperCase() || "NAME"}. The script can print
              or send it anywhere; Zilean masks it only in what it records. Plain variables reach
              every script whether or not this is ticked.
            </p>
          )}
          <div className="row">
            <button type="submit">{draft.id ? "Save variable" : "Create variable"}</button>
            {draft.id && (
              <button type="button" className="secondary" onClick={() => setDraft(BLANK)}>
                Cancel
              </button>
            )}
            <Help topic="secret values">
              Once saved, a secret&apos;s value is never shown again. To change it, type a new
              value; an empty value keeps the stored one. Turning a secret into a plain variable
              with an empty value clears it rather than revealing it.
            </Help>
          </div>
        </form>
      )}
      {confirm.dialog}
    </>
  );
}
