import { createContext, useContext } from "react";
import type { Account, Permission } from "./api/client";

export interface Session {
  me: Account;
  refresh: () => Promise<void>;
}

export const SessionContext = createContext<Session | null>(null);

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside SessionContext");
  return session;
}

/** Whether the signed-in user holds `permission` (a Super Admin holds them all). */
export function allows(me: Account, permission: Permission): boolean {
  return me.is_super_admin || me.permissions.includes(permission);
}

/** A one-line reason a control is unavailable, or null when it is allowed. */
export function deniedReason(me: Account, ...needed: Permission[]): string | null {
  const missing = needed.filter((p) => !allows(me, p));
  if (missing.length === 0) return null;
  return `Needs the ${missing.join(" and ")} permission${missing.length > 1 ? "s" : ""}.`;
}

export function usePermission(...needed: Permission[]): string | null {
  return deniedReason(useSession().me, ...needed);
}
