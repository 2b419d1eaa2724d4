import type { Job } from "../api/client";

export interface GroupNode {
  path: string;
  name: string;
  count: number; // jobs in this group and every group below it
  children: GroupNode[];
}

/** Build the nested `/` group tree with counts from the jobs' group names. */
export function groupTree(jobs: Job[]): GroupNode[] {
  const root: GroupNode = { path: "", name: "", count: 0, children: [] };
  for (const job of jobs) {
    let node = root;
    node.count++;
    if (!job.group_name) continue;
    let path = "";
    for (const part of job.group_name.split("/")) {
      path = path ? `${path}/${part}` : part;
      let child = node.children.find((c) => c.name === part);
      if (!child) {
        child = { path, name: part, count: 0, children: [] };
        node.children.push(child);
      }
      child.count++;
      node = child;
    }
  }
  const sort = (nodes: GroupNode[]) => {
    nodes.sort((a, b) => a.name.localeCompare(b.name));
    nodes.forEach((n) => sort(n.children));
  };
  sort(root.children);
  return root.children;
}

export function inGroup(job: Job, group: string): boolean {
  return group === "" || job.group_name === group || job.group_name.startsWith(`${group}/`);
}
