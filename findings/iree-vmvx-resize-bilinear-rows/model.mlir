module {
  func.func @nncert(%arg0: !torch.vtensor<[1,3,1,1],f32>) -> !torch.vtensor<[1,4,2,1],f32> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n1> : tensor<4xsi64>} : () -> !torch.vtensor<[4],si64> 
    %none = torch.constant.none
    %1 = torch.operator "onnx.Transpose"(%arg0) {torch.onnx.perm = [0 : si64, 3 : si64, 1 : si64, 2 : si64]} : (!torch.vtensor<[1,3,1,1],f32>) -> !torch.vtensor<[1,1,3,1],f32> 
    %2 = torch.operator "onnx.Resize"(%1, %none, %none, %0) {torch.onnx.coordinate_transformation_mode = "asymmetric", torch.onnx.mode = "linear"} : (!torch.vtensor<[1,1,3,1],f32>, !torch.none, !torch.none, !torch.vtensor<[4],si64>) -> !torch.vtensor<[1,1,4,2],f32> 
    %3 = torch.operator "onnx.Transpose"(%2) {torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]} : (!torch.vtensor<[1,1,4,2],f32>) -> !torch.vtensor<[1,4,2,1],f32> 
    return %3 : !torch.vtensor<[1,4,2,1],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n1: "0x080000000100000000000000010000000000000004000000000000000200000000000000"
    }
  }
#-}
