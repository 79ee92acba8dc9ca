/*
 * `sluice acl`: the ACL rule a Redis user needs to run sluice, and nothing
 * more: its keys (the prefix), and the commands of the steps it runs
 * (every Redis-side step is a script, and Redis checks each command a
 * script calls against the user's rule). test_acl runs every primitive and
 * the tool under exactly this rule on a single Redis, a Sentinel set and a
 * cluster, and takes each command away in turn to see the step that needs
 * it fail, naming it: that is how these lists were measured, and how they
 * stay true.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* What every client runs: the handshake (PING, SCRIPT LOAD; INFO for the
 * server's run_id, which tells a restart from a reconnect; WAIT 0 0 for
 * the replicas online), steps by EVALSHA, EVAL when Redis lost a script
 * (restart, SCRIPT FLUSH), TIME, which every script asks first, and INFO
 * again for the writes a replica has (the record of unreplicated
 * writes, on by default). */
static const char base_cmds[] = "ping script|load evalsha eval time info wait";

/* What each primitive's scripts call, and BRPOP for the blocking side
 * (waiters, consumers) with the wake-up lists it pushes to. */
static const struct primitive {
  const char *name;
  const char *cmds;
} primitives[] = {
    {"sem",
     "hdel hget hincrby hmget hset lpush ltrim pexpire pttl zadd zcard zcount zrange "
     "zrangebyscore zrem zremrangebyscore zscore brpop"},
    {"rl", /* the sliding log's lists, and its conversion of an older layout's sets */
     "get set hincrby hmget hset pexpire llen lrange lindex ltrim rpush zcard zcount zrange "
     "sort lset"},
    {"dq",
     "hdel hget hincrby hmget hset hsetnx lpush ltrim pexpire pexpireat zadd zcard zcount "
     "zrange zrangebyscore zrem zremrangebyrank zscore brpop"},
};
#define NPRIMITIVES (sizeof primitives / sizeof primitives[0])
enum { RL = 1 }; /* primitives[RL] */

/* `sluice top` without names: the discovery script's. */
static const char scan_cmds[] = "scan get hmget pttl llen zcard";

typedef struct acl_args {
  const char *prefix;
  int sentinel, cluster, db, wait, scan;
  int want[NPRIMITIVES]; /* all 0: every primitive */
} acl_args;

/* The rule's commands, once each, in the order first added: " +a +b ",
 * every word between spaces so that " +cmd " finds one. */
typedef struct cmd_set {
  char text[1024];
} cmd_set;

/* Adds each word of the space-separated cmds not there yet. */
static void add(cmd_set *s, const char *cmds) {
  if (!s->text[0]) strcpy(s->text, " ");
  for (const char *p = cmds; *p;) {
    size_t len = strcspn(p, " "), used = strlen(s->text);
    char word[48];
    snprintf(word, sizeof word, " +%.*s ", (int)len, p);
    if (!strstr(s->text, word) && used + len + 2 < sizeof s->text)
      snprintf(s->text + used, sizeof s->text - used, "+%.*s ", (int)len, p);
    p += len + (p[len] == ' ');
  }
}

static void data_node_commands(const acl_args *a, cmd_set *s) {
  int any = 0;
  for (size_t i = 0; i < NPRIMITIVES; i++) any |= a->want[i];
  add(s, base_cmds);
  for (size_t i = 0; i < NPRIMITIVES; i++)
    if (!any || a->want[i]) add(s, primitives[i].cmds);
  if (a->db) add(s, "select");
  if (a->wait) add(s, "wait");
  if (a->sentinel) add(s, "role"); /* the master is verified with ROLE */
  if (a->cluster) add(s, "cluster|slots asking");
  /* A limiter's call on a cluster carries a node's checks of several slots
   * and reads each key first (src/lua/_spread.lua). Without it the calls
   * go slot by slot: slower, never wrong. */
  if (a->cluster && (!any || a->want[RL])) add(s, "exists");
  if (a->scan) add(s, scan_cmds);
}

/* The prefix as a key pattern: glob characters in it match themselves. */
static void print_pattern(const char *prefix) {
  fputs("~", stdout);
  for (const char *p = prefix; *p; p++) {
    if (strchr("*?[]\\", *p)) fputc('\\', stdout);
    fputc(*p, stdout);
  }
  fputs("*", stdout);
}

static void print_rule(const acl_args *a) {
  cmd_set s = {{0}};
  data_node_commands(a, &s);
  printf("# %s: ACL SETUSER <user> on ><password> followed by\n",
         a->sentinel  ? "the master and its replicas"
         : a->cluster ? "every node of the cluster"
                      : "the Redis server");
  fputs("resetkeys ", stdout);
  print_pattern(a->prefix);
  fputs(" resetchannels -@all", stdout);
  s.text[strlen(s.text) - 1] = '\n'; /* its last space */
  fputs(s.text, stdout);
  if (!a->sentinel) return;
  printf(
      "# every sentinel (its user: sentinel_username, sentinel_password). Needed: ping,\n"
      "# sentinel|get-master-addr-by-name (finding the master); for failovers:\n"
      "# sentinel|master (not taking an old master while a sentinel fails it over or\n"
      "# has not heard of the switch), sentinel|sentinels (the other sentinels, if the\n"
      "# given ones go) and subscribe on +switch-master (hearing of a failover at once)\n"
      "resetkeys resetchannels &+switch-master -@all +ping +sentinel|get-master-addr-by-name "
      "+sentinel|master +sentinel|sentinels +subscribe\n");
}

static void usage(FILE *f) {
  fputs(
      "usage: sluice acl [--prefix P] [--sentinel | --cluster] [--db] [--wait] [--scan]\n"
      "                  [sem] [rl] [dq]\n"
      "\n"
      "Print the ACL rule a Redis user needs to run sluice with key prefix P (default\n"
      "\"sluice:\"): the keys under P, and only the commands sluice's steps run. Give\n"
      "the primitives used (default all of them; the tool's commands use theirs:\n"
      "sem run/status/release sem, rl check/wait rl, dq push/consume/status dq, top\n"
      "sem and dq). --sentinel: also the sentinels' rule; --cluster: a cluster's\n"
      "commands; --db: a database other than 0 (SELECT); --wait: accepted, as every\n"
      "rule has WAIT now (wait_replicas and the record of unreplicated writes ask\n"
      "it); --scan: `sluice top` without NAMEs, which lists objects by SCAN. SCAN\n"
      "is not confined by key patterns: a user allowed it can list every key name\n"
      "of the server, other prefixes' too. Without --scan, give `sluice top` the\n"
      "NAMEs to show.\n",
      f);
}

static int parse(int argc, char **argv, acl_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    size_t k;
    if (strcmp(s, "--prefix") == 0 && i + 1 < argc) a->prefix = argv[++i];
    else if (strncmp(s, "--prefix=", 9) == 0) a->prefix = s + 9;
    else if (strcmp(s, "--sentinel") == 0) a->sentinel = 1;
    else if (strcmp(s, "--cluster") == 0) a->cluster = 1;
    else if (strcmp(s, "--db") == 0) a->db = 1;
    else if (strcmp(s, "--wait") == 0) a->wait = 1;
    else if (strcmp(s, "--scan") == 0) a->scan = 1;
    else {
      for (k = 0; k < NPRIMITIVES && strcmp(s, primitives[k].name) != 0; k++) {}
      if (k == NPRIMITIVES) {
        cli_error("unknown argument '%s'", cli_echo(s));
        return -1;
      }
      a->want[k] = 1;
    }
  }
  if (a->sentinel && a->cluster) {
    cli_error("--sentinel and --cluster: one topology at a time");
    return -1;
  }
  if (a->cluster && a->db) {
    cli_error("a Redis Cluster has only database 0: no --db with --cluster");
    return -1;
  }
  return 0;
}

int cli_acl_main(int argc, char **argv) {
  acl_args a = {"sluice:", 0, 0, 0, 0, 0, {0}};
  cli_set_command("acl");
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
  if (parse(argc, argv, &a) != 0) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  print_rule(&a);
  return CLI_EXIT_OK;
}
