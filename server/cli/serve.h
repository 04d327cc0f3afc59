/* serve.h: `moeserve serve` (serve.c). */
#ifndef MS_SERVE_H
#define MS_SERVE_H

/* Runs the daemon until SIGTERM/SIGINT; returns an exit status. */
int ms_cmd_serve(int argc, char **argv, const char *default_model);

#endif
