/* shardmeter commands that talk to running daemons over their HTTP API. */
#ifndef SM_CLUSTER_H
#define SM_CLUSTER_H

int cmd_status(int argc, char **argv);
int cmd_assemble(int argc, char **argv);

#endif
