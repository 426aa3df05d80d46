"""The DistributedStrategy message schema: every field, its type and its default.

Mirrors ``paddle/fluid/framework/distributed_strategy.proto`` of Paddle
3.3.1 (package ``paddle.fleet``): the same messages, fields (in field-number
order) and defaults, as read from the protobuf descriptors. refimpl has no
protobuf dependency; ``strategy_message`` turns this table into small typed
records with protobuf's conversion rules.

Each message is a list of fields:

* ``(name, scalar_type, default)`` for a singular scalar; ``scalar_type`` is
  ``bool``, ``int32``, ``int64``, ``uint32``, ``uint64``, ``float`` (stored
  with float32 precision, as protobuf does), ``double``, ``string`` or
  ``enum:<EnumName>`` (see :data:`ENUMS`);
* ``(name, "<MessageName>")`` for a nested message;
* ``(name, "<type>*")`` for a repeated field (scalars or messages).
"""

MESSAGES = {
    "DistributedStrategy": [
        ("mode", "enum:Mode", 1), ("amp", "bool", False), ("recompute", "bool", False),
        ("localsgd", "bool", False), ("dgc", "bool", False), ("gradient_merge", "bool", False),
        ("lars", "bool", False), ("lamb", "bool", False), ("pipeline", "bool", False),
        ("elastic", "bool", False), ("auto", "bool", False), ("a_sync", "bool", True),
        ("sync_nccl_allreduce", "bool", True), ("nccl_comm_num", "int32", 1),
        ("use_hierarchical_allreduce", "bool", False), ("hierarchical_allreduce_inter_nranks", "int32", 1),
        ("sync_batch_norm", "bool", False), ("fuse_all_reduce_ops", "bool", True),
        ("fuse_grad_size_in_MB", "int32", 32), ("fuse_grad_size_in_TFLOPS", "float", 50.0),
        ("cudnn_exhaustive_search", "bool", False), ("conv_workspace_size_limit", "int32", 512),
        ("cudnn_batchnorm_spatial_persistent", "bool", False), ("adaptive_localsgd", "bool", False),
        ("fp16_allreduce", "bool", False), ("sharding", "bool", False),
        ("last_comm_group_size_MB", "float", 1.0), ("find_unused_parameters", "bool", False),
        ("tensor_parallel", "bool", False), ("without_graph_optimization", "bool", True),
        ("fuse_grad_size_in_num", "int32", 8), ("calc_comm_same_stream", "bool", False),
        ("asp", "bool", False), ("fuse_grad_merge", "bool", False), ("semi_auto", "bool", False),
        ("adam_d2sum", "bool", False), ("auto_search", "bool", False), ("heter_ccl_mode", "bool", False),
        ("is_fl_ps_mode", "bool", False), ("with_coordinator", "bool", False), ("qat", "bool", False),
        ("split_data", "bool", True), ("recompute_configs", "RecomputeConfig"), ("amp_configs", "AMPConfig"),
        ("localsgd_configs", "LocalSGDConfig"), ("gradient_merge_configs", "GradientMergeConfig"),
        ("dgc_configs", "DGCConfig"), ("pipeline_configs", "PipelineConfig"),
        ("a_sync_configs", "AsyncConfig"), ("lars_configs", "LarsConfig"), ("lamb_configs", "LambConfig"),
        ("adaptive_localsgd_configs", "AdaptiveLocalSGDConfig"), ("sharding_configs", "ShardingConfig"),
        ("hybrid_configs", "HybridConfig"), ("tensor_parallel_configs", "TensorParallelConfig"),
        ("trainer_desc_configs", "TrainerDescConfig"), ("downpour_table_param", "TableParameter*"),
        ("fs_client_param", "FsClientParameter"), ("qat_configs", "QatConfig"),
        ("build_strategy", "BuildStrategy"), ("gradient_scale_configs", "GradientScaleConfig"),
    ],
    "RecomputeConfig": [
        ("checkpoints", "string*"), ("enable_offload", "bool", False), ("checkpoint_shape", "int32*"),
        ("enable_tuning", "bool", False), ("refined_ops_patterns", "RefinedOpsPattern*"),
    ],
    "RefinedOpsPattern": [
        ("main_ops", "string*"), ("num", "int32", 0), ("pre_ops", "string*"), ("suf_ops", "string*"),
    ],
    "AMPConfig": [
        ("init_loss_scaling", "float", 32768.0), ("incr_every_n_steps", "int32", 1000),
        ("decr_every_n_nan_or_inf", "int32", 2), ("incr_ratio", "float", 2.0), ("decr_ratio", "float", 0.8),
        ("use_dynamic_loss_scaling", "bool", True), ("custom_white_list", "string*"),
        ("custom_black_list", "string*"), ("custom_black_varnames", "string*"),
        ("use_pure_fp16", "bool", False), ("use_fp16_guard", "bool", True),
        ("use_optimizer_fp16", "bool", False), ("use_pure_bf16", "bool", False),
    ],
    "LocalSGDConfig": [
        ("k_steps", "int32", 1), ("begin_step", "int32", 1),
    ],
    "GradientMergeConfig": [
        ("k_steps", "int32", 1), ("avg", "bool", True),
    ],
    "DGCConfig": [
        ("rampup_begin_step", "int32", 0), ("rampup_step", "int32", 1), ("sparsity", "float*"),
    ],
    "PipelineConfig": [
        ("micro_batch_size", "int32", 1), ("accumulate_steps", "int32", 1),
        ("schedule_mode", "string", '1F1B'), ("p2p_cache_shape", "bool", True),
        ("enable_partial_send_recv", "bool", True),
    ],
    "AsyncConfig": [
        ("k_steps", "int32", -1), ("max_merge_var_num", "int32", 1), ("send_queue_size", "int32", 16),
        ("independent_recv_thread", "bool", False), ("min_send_grad_num_before_recv", "int32", 1),
        ("thread_pool_size", "int32", 1), ("send_wait_times", "int32", 1),
        ("runtime_split_send_recv", "bool", False), ("launch_barrier", "bool", True),
        ("heter_worker_device_guard", "string", 'cpu'), ("lr_decay_steps", "int32", 10),
        ("use_ps_gpu", "int32", 0), ("use_gpu_graph", "int32", 0),
    ],
    "LarsConfig": [
        ("lars_coeff", "float", 0.001), ("lars_weight_decay", "float", 0.0005), ("epsilon", "float", 0.0),
        ("exclude_from_weight_decay", "string*"),
    ],
    "LambConfig": [
        ("lamb_weight_decay", "float", 0.01), ("exclude_from_weight_decay", "string*"),
    ],
    "AdaptiveLocalSGDConfig": [
        ("init_k_steps", "int32", 1), ("begin_step", "int32", 1),
    ],
    "ShardingConfig": [
        ("sharding_segment_strategy", "string", 'segment_broadcast_MB'),
        ("segment_broadcast_MB", "float", 32.0), ("segment_anchors", "string*"),
        ("sharding_degree", "int32", 8), ("mp_degree", "int32", 1), ("dp_degree", "int32", 1),
        ("hybrid_dp", "bool", False), ("gradient_merge_acc_step", "int32", 1),
        ("optimize_offload", "bool", False), ("pp_allreduce_in_optimize", "bool", False),
        ("pp_degree", "int32", 1), ("optimize_cast", "bool", False),
        ("_dp_as_optimizer_sharding", "bool", False), ("stage", "int32", 1), ("enable_tuning", "bool", False),
        ("use_calc_stream", "bool", False),
    ],
    "HybridConfig": [
        ("dp_degree", "int32", -1), ("mp_degree", "int32", 1), ("pp_degree", "int32", 1),
        ("sharding_degree", "int32", 1), ("sep_degree", "int32", 1), ("mp_configs", "MpConfig"),
        ("pp_configs", "PpConfig"), ("sharding_configs", "DygraphShardingConfig"),
        ("enable_optimizer_timer", "bool", False), ("split_norm_comm", "bool", False),
        ("ep_degree", "int32", 1), ("moe_sharding_degree", "int32", 1), ("dp_configs", "DpConfig"),
        ("sep_configs", "SepConfig"), ("dp_sep_configs", "DpSepConfig"), ("pp_tp_configs", "PpTpConfig"),
        ("ep_configs", "EpConfig"), ("moe_sharding_configs", "MoeShardingConfig"),
        ("default_comm_group_configs", "DefaultCommGroupConfig"), ("cp_degree", "int32", 1),
        ("cp_sharding_degree", "int32", 1), ("cp_configs", "CpConfig"),
        ("cp_sharding_configs", "CpShardingConfig"), ("dp_cp_configs", "DpCpConfig"),
        ("cp_mp_configs", "CpMpConfig"),
    ],
    "MpConfig": [
        ("sync_param", "bool", True), ("sync_grad", "bool", False), ("sync_moment", "bool", False),
        ("sync_mode", "string", 'broadcast'), ("mp_async_allreduce", "bool", False),
        ("mp_skip_c_identity", "bool", False), ("mp_fused_linear_param_grad_add", "bool", False),
        ("need_broadcast_data", "bool", True), ("recompute_allgather", "bool", False),
        ("sp_async_reduce_scatter", "bool", False), ("nccl_config", "NCCLConfig"),
    ],
    "NCCLConfig": [
        ("commName", "string", ''), ("ll_buffsize", "int32", 0), ("ll128_buffsize", "int32", 0),
        ("simple_buffsize", "int32", 0), ("buffsize_align", "int32", 0), ("nchannels", "int32", 0),
        ("algoStr", "string", ''), ("protoStr", "string", ''),
    ],
    "PpConfig": [
        ("dp_comm_overlap", "bool", False), ("delay_scale_loss", "bool", False),
        ("enable_timer", "bool", False), ("sharding_comm_overlap", "bool", False),
        ("profiling", "bool", False), ("release_gradients", "bool", False),
        ("overlap_p2p_comm", "bool", False), ("clear_every_step_cache", "bool", False),
        ("use_batch_p2p_comm", "bool", True), ("best_unbalanced_scheduler", "bool", False),
        ("enable_offload_queue", "bool", False), ("enable_dynamic_shape", "bool", False),
        ("use_dualpipev", "bool", False), ("forward_backward_overlap_scheduler", "bool", False),
        ("coll_nccl_config", "NCCLConfig"), ("p2p_nccl_config", "NCCLConfig"),
        ("shared_nccl_config", "NCCLConfig"), ("sync_param", "bool", False), ("sync_moment", "bool", False),
        ("sync_mode", "string", 'broadcast'),
    ],
    "DygraphShardingConfig": [
        ("tensor_fusion", "bool", False), ("accumulate_steps", "int32", 1), ("comm_overlap", "bool", False),
        ("split_param", "bool", False), ("fuse_optimizer", "bool", True), ("use_reduce_avg", "bool", True),
        ("comm_buffer_size_MB", "int32", 256), ("release_gradients", "bool", False),
        ("free_grads_in_comm", "bool", False), ("enable_fuse_optimizer_states", "bool", False),
        ("nccl_config", "NCCLConfig"), ("check_nccl_config", "NCCLConfig"),
        ("offload_opt_buffer_size", "int32", -1),
    ],
    "DpConfig": [
        ("nccl_config", "NCCLConfig"), ("check_nccl_config", "NCCLConfig"),
    ],
    "SepConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "DpSepConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "PpTpConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "EpConfig": [
        ("nccl_config", "NCCLConfig"), ("grad_nccl_config", "NCCLConfig"),
    ],
    "MoeShardingConfig": [
        ("nccl_config", "NCCLConfig"), ("check_nccl_config", "NCCLConfig"),
    ],
    "DefaultCommGroupConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "CpConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "CpShardingConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "DpCpConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "CpMpConfig": [
        ("nccl_config", "NCCLConfig"),
    ],
    "TensorParallelConfig": [
        ("tensor_parallel_degree", "int32", 1), ("tensor_init_seed", "int32", -1),
    ],
    "TrainerDescConfig": [
        ("dump_fields_path", "string", ''), ("dump_fields", "string*"), ("dump_param", "string*"),
        ("stat_var_names", "string*"), ("trainer", "string", ''), ("device_worker", "string", ''),
        ("local_sparse", "string*"), ("remote_sparse", "string*"),
    ],
    "TableParameter": [
        ("table_id", "uint64", 0), ("table_name", "string", ''), ("table_class", "string", ''),
        ("shard_num", "uint64", 1000), ("type", "enum:TableType", 0), ("accessor", "TableAccessorParameter"),
        ("compress_in_save", "bool", False), ("enable_sparse_table_cache", "bool", True),
        ("sparse_table_cache_rate", "double", 0.00055), ("sparse_table_cache_file_num", "uint32", 16),
        ("enable_revert", "bool", False), ("shard_merge_rate", "float", 1.0),
        ("use_gpu_graph", "bool", False),
    ],
    "TableAccessorParameter": [
        ("accessor_class", "string", ''), ("fea_dim", "uint32", 11), ("embedx_dim", "uint32", 8),
        ("embedx_threshold", "uint32", 10), ("ctr_accessor_param", "CtrAccessorParameter"),
        ("table_accessor_save_param", "TableAccessorSaveParameter*"), ("embed_sgd_param", "SGDParameter"),
        ("embedx_sgd_param", "SGDParameter"), ("graph_sgd_param", "GraphSGDParameter"),
    ],
    "CtrAccessorParameter": [
        ("nonclk_coeff", "float", 0.1), ("click_coeff", "float", 1.0), ("base_threshold", "float", 1.5),
        ("delta_threshold", "float", 0.25), ("delta_keep_days", "float", 16.0),
        ("show_click_decay_rate", "float", 0.98), ("delete_threshold", "float", 0.8),
        ("delete_after_unseen_days", "float", 30.0), ("ssd_unseenday_threshold", "int32", 1),
        ("show_scale", "bool", True), ("zero_init", "bool", True), ("load_filter_slots", "float*"),
        ("save_filter_slots", "float*"),
    ],
    "TableAccessorSaveParameter": [
        ("param", "uint32", 0), ("converter", "string", ''), ("deconverter", "string", ''),
    ],
    "SGDParameter": [
        ("name", "string", ''), ("naive", "SparseNaiveSGDRuleParameter"),
        ("adagrad", "SparseAdagradSGDRuleParameter"), ("adam", "SparseAdamSGDParameter"),
    ],
    "SparseNaiveSGDRuleParameter": [
        ("learning_rate", "double", 0.05), ("initial_range", "double", 0.0001), ("weight_bounds", "float*"),
    ],
    "SparseAdagradSGDRuleParameter": [
        ("learning_rate", "double", 0.05), ("initial_g2sum", "double", 3.0),
        ("initial_range", "double", 0.0001), ("weight_bounds", "float*"),
    ],
    "SparseAdamSGDParameter": [
        ("learning_rate", "double", 0.001), ("initial_range", "double", 0.0001),
        ("beta1_decay_rate", "double", 0.9), ("beta2_decay_rate", "double", 0.999),
        ("ada_epsilon", "double", 1e-08), ("weight_bounds", "float*"),
    ],
    "GraphSGDParameter": [
        ("nodeid_slot", "uint32", 9008), ("feature_learning_rate", "float", 0.05),
    ],
    "FsClientParameter": [
        ("uri", "string", ''), ("user", "string", ''), ("passwd", "string", ''), ("hadoop_bin", "string", ''),
    ],
    "QatConfig": [
        ("channel_wise_abs_max", "bool", True), ("weight_bits", "int32", 8), ("activation_bits", "int32", 8),
        ("not_quant_pattern", "string*"), ("algo", "string", ''),
    ],
    "BuildStrategy": [
        ("fuse_elewise_add_act_ops", "bool", False), ("fuse_bn_act_ops", "bool", False),
        ("fuse_relu_depthwise_conv", "bool", False), ("fuse_broadcast_ops", "bool", False),
        ("fuse_all_optimizer_ops", "bool", False), ("enable_inplace", "bool", False),
        ("enable_backward_optimizer_op_deps", "bool", True), ("cache_runtime_context", "bool", False),
        ("fuse_bn_add_act_ops", "bool", True), ("enable_auto_fusion", "bool", False),
        ("enable_addto", "bool", False), ("allow_cuda_graph_capture", "bool", False),
        ("reduce_strategy", "int32", 0), ("fuse_gemm_epilogue", "bool", False),
        ("debug_graphviz_path", "string", ''), ("fused_attention", "bool", False),
        ("fused_feedforward", "bool", False), ("fuse_dot_product_attention", "bool", False),
        ("fuse_resunit", "bool", False),
    ],
    "GradientScaleConfig": [
        ("scale_strategy", "string", 'avg'), ("scale_gradient", "bool", False),
    ],
}

ENUMS = {
    "Mode": {'COLLECTIVE': 1, 'PS': 2, 'PIPELINE': 3, 'HETER': 4},
    "TableType": {'PS_SPARSE_TABLE': 0, 'PS_DENSE_TABLE': 1},
}
