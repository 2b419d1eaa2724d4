import type { Permission } from "../api/client";
import { Notice } from "../components/States";
import { Link } from "../router";
import { allows, useSession } from "../session";
import { AccountSection } from "./settings/Account";
import { AuditSection } from "./settings/Audit";
import { McpSection } from "./settings/Mcp";
import { NotificationsSection } from "./settings/Notifications";
import { RetentionSection } from "./settings/Retention";
import { RolesSection } from "./settings/Roles";
import { SmtpSection } from "./settings/Smtp";
import { TokensSection } from "./settings/Tokens";
import { UsersSection } from "./settings/Users";
import { VariablesSection } from "./settings/Variables";
import { VolumesSection } from "./settings/Volumes";

interface SectionDef {
  slug: string;
  title: string;
  /** Any one of these lets the user see the section; none means every signed-in user. */
  needs: Permission[];
  render: () => React.ReactNode;
}

export const SECTIONS: SectionDef[] = [
  { slug: "account", title: "Account", needs: [], render: () => <AccountSection /> },
  { slug: "users", title: "Users", needs: ["users:read"], render: () => <UsersSection /> },
  { slug: "roles", title: "Roles", needs: ["roles:read"], render: () => <RolesSection /> },
  { slug: "tokens", title: "API tokens", needs: [], render: () => <TokensSection /> },
  {
    slug: "variables",
    title: "Global variables",
    needs: ["globalvars:read"],
    render: () => <VariablesSection />,
  },
  {
    slug: "volumes",
    title: "Script volumes",
    needs: ["scriptvolumes:read"],
    render: () => <VolumesSection />,
  },
  {
    slug: "notifications",
    title: "Notifications",
    needs: ["notify_settings:read"],
    render: () => <NotificationsSection />,
  },
  { slug: "smtp", title: "SMTP", needs: ["settings:smtp"], render: () => <SmtpSection /> },
  { slug: "mcp", title: "MCP", needs: ["settings:mcp"], render: () => <McpSection /> },
  { slug: "audit", title: "Audit log", needs: ["audit:read"], render: () => <AuditSection /> },
  {
    slug: "retention",
    title: "Retention",
    needs: ["settings:queue_jobs", "audit:read"],
    render: () => <RetentionSection />,
  },
];

/** The settings area: a list of the sections this user may open, and the open one. */
export function Settings(props: { section: string }) {
  const { me } = useSession();
  const visible = SECTIONS.filter(
    (s) => s.needs.length === 0 || s.needs.some((p) => allows(me, p)),
  );
  const current = SECTIONS.find((s) => s.slug === props.section);
  const shown = current && visible.includes(current);
  return (
    <div className="settings-page">
      <nav aria-label="Settings" className="settings-nav">
        <h2>Settings</h2>
        <ul>
          {visible.map((s) => (
            <li key={s.slug}>
              <Link to={`/settings/${s.slug}`} className={s === current ? "current" : undefined}>
                {s.title}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <section className="settings-body" aria-label={shown ? current.title : "Settings"}>
        {shown ? (
          current.render()
        ) : (
          <Notice
            kind="empty"
            text={
              current
                ? `${current.title} needs one of: ${current.needs.join(", ")}.`
                : "There is no settings section at this address."
            }
          />
        )}
      </section>
    </div>
  );
}
